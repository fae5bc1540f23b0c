"""An order check of `generation_padding.py`: replay rounds of an audited `webshop_cpu` rollout
(the per-step contexts its policy saw, one generation call per round) on the former padded
path and the new one, alternating padded, unpadded, unpadded, padded, best of the two each,
so that a process's slow first generation and a drifting load fall on both paths.

    python benchmarks/perf/generation_padding_replay.py --audit RUN/audit/iter_000001/trajectories.jsonl \\
        --warm-start warm_start.safetensors --rounds 0,1
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections import Counter, defaultdict
from pathlib import Path

import torch
from safetensors.torch import load_file

from orsd_gym import profiling
from orsd_gym.policies.base import SamplingParams
from orsd_gym.policies.models import load_policy
from orsd_gym.train.config import load_config


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--audit", required=True, help="an iteration's audit trajectories.jsonl")
    parser.add_argument("--warm-start", required=True, help="the weights the audited rollout ran with")
    parser.add_argument("--rounds", default="0,1", help="comma-separated turn indices to replay")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    config = load_config("webshop_cpu", [])
    policy = load_policy(config.model.name, lora=config.model.lora.settings())
    policy.load_state_dict(load_file(args.warm_start))
    by_round: dict[int, list[dict]] = defaultdict(list)
    with open(args.audit, encoding="utf-8") as audit:
        for line in audit:
            row = json.loads(line)
            by_round[row["step"]].append(row)
    rounds = [int(r) for r in args.rounds.split(",")]
    params = SamplingParams(max_new_tokens=config.rollout.max_new_tokens, temperature=args.temperature, stop=("\n",))
    runs: dict[str, list[dict]] = {"padded": [], "unpadded": []}
    for mode in ("padded", "unpadded", "unpadded", "padded"):
        policy.forward.group_prefill = policy.sampler.drop_finished_rows = mode == "unpadded"
        seconds, phases = 0.0, Counter()
        for turn in rounds:
            contexts = [row["token_ids"][: len(row["token_ids"]) - sum(row["loss_mask"])] for row in by_round[turn]]
            with profiling.profiling() as profiler:
                started = time.perf_counter()
                policy.generate(contexts, params, seeds=[1000 * turn + i for i in range(len(contexts))])
                seconds += time.perf_counter() - started
            phases.update({path: stats.seconds for path, stats in profiler.phases.items()})
        runs[mode].append({"seconds": seconds, "phases": dict(phases), "load_average": os.getloadavg()})
        print(f"{mode:<9}{seconds:8.1f} s {dict(phases)} load {os.getloadavg()}", flush=True)
    best = {mode: min(r["seconds"] for r in results) for mode, results in runs.items()}
    ratio = best["padded"] / best["unpadded"]
    print(f"best: padded {best['padded']:.1f} s, unpadded {best['unpadded']:.1f} s: {ratio:.2f}x")
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "runs": runs, "best": best}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
