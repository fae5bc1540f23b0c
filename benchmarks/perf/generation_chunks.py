"""The row budget side by side: a preset's evaluation with every turn generated in one batch and
in chunks under the budget (`HFPolicy.generation_budget`: what ``optim.max_memory_gb`` leaves
beside the weights), alternating in one process on the same seeds. Per mode: the evaluation's
seconds, its prefill's and decode's, the process's peak resident memory, and whether every
sampled token is the same as in one batch.

    python benchmarks/perf/generation_chunks.py --preset webshop_cpu --json out.json \\
        env.kwargs.data_dir=../shared/data/webshop eval.env_kwargs.data_dir=../shared/data/webshop
"""

from __future__ import annotations

from _side_by_side import alternate, parser, write_record

from orsd_gym import profiling
from orsd_gym.policies.models import load_policy
from orsd_gym.train.config import load_config
from orsd_gym.train.envs import close_envs, make_envs
from orsd_gym.train.evaluate import evaluate
from orsd_gym.train.plan import build_task_plan
from orsd_gym.train.update import memory_left

MODES = ("one batch", "chunked")


def main() -> int:
    args_parser = parser(__doc__.splitlines()[0], repeats=1)
    args_parser.add_argument("--preset", default="webshop_cpu")
    args_parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="overrides of the preset")
    args = args_parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    config = load_config(args.preset, args.overrides)
    model = config.model
    policy = load_policy(
        model.name, dtype=model.dtype, lora=model.lora.settings(), inference_dtype=model.inference_dtype
    )
    budget = memory_left(policy, None, config.optim)
    if budget is None:
        raise SystemExit(f"{args.preset} sets no optim.max_memory_gb: nothing to chunk under")
    plan = build_task_plan(config)
    envs = make_envs(
        config.env, plan.eval_kwargs, config.env.num_envs or config.eval.num_tasks * config.eval.group_size
    )

    def run(mode: str) -> dict:
        policy.generation_budget = None if mode == "one batch" else budget
        with profiling.profiling() as profiler:
            trajectories, _ = evaluate(policy, envs, plan, config, seed=0)
        profile = profiler.as_dict()
        phases = profile["phases"]
        return {
            "seconds": _total(phases),
            "prefill_seconds": _total(phases, "prefill"),
            "decode_seconds": _total(phases, "decode"),
            "peak_rss_gb": profile["peak_rss_gb"],
            "counters": profile["counters"],
            "tokens": [t.token_ids for t in trajectories],
        }

    try:
        results = alternate(MODES, run, args.repeats)
    finally:
        close_envs(envs)
    reference = results[MODES[0]][0]["tokens"]
    identical = all(run["tokens"] == reference for mode in MODES for run in results[mode])
    record = {"budget_gb": budget / 1e9, "identical_samples": identical, "modes": {}}
    print(f"{args.preset} evaluation, {config.eval.num_tasks} tasks; generation budget {budget / 1e9:.2f} GB")
    for mode in MODES:
        best = min(results[mode], key=lambda r: r["prefill_seconds"] + r["decode_seconds"])
        record["modes"][mode] = {k: v for k, v in best.items() if k != "tokens"}
        print(
            f"  {mode:<10} prefill {best['prefill_seconds']:7.1f} s, decode {best['decode_seconds']:6.1f} s, "
            f"peak {best['peak_rss_gb']:.2f} GB, chunks {best['counters'].get('generate_chunks', 0):.0f}"
        )
    print(f"  every sample identical: {identical}")
    write_record(args, record)
    return 0


def _total(phases: dict, leaf: str | None = None) -> float:
    """Seconds of every phase named ``leaf`` (None: every top-level phase)."""
    if leaf is None:
        return sum(s["seconds"] for p, s in phases.items() if "/" not in p)
    return sum(s["seconds"] for p, s in phases.items() if p.rsplit("/", 1)[-1] == leaf)


if __name__ == "__main__":
    raise SystemExit(main())
