"""Reset/step latency and resident memory of the ALFWorld env over many resets.

    python benchmarks/perf/alfworld_resources.py                      # generated tasks, 200 resets
    python benchmarks/perf/alfworld_resources.py --split valid_seen --data-dir DIR

Each reset starts a different task (cycling through the pool), then a few admissible actions
are played, as a rollout would. Prints latency percentiles and RSS checkpoints (this process
plus any engine worker process) so memory growth across resets is visible.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import gymnasium as gym
import numpy as np
import psutil

import orsd_gym  # noqa: F401


def rss_mib() -> float:
    me = psutil.Process()
    return sum(p.memory_info().rss for p in [me, *me.children(recursive=True)]) / 2**20


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--resets", type=int, default=200)
    parser.add_argument("--steps", type=int, default=3, help="actions per episode")
    parser.add_argument("--split", default="generated")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--pool", type=int, default=40, help="generated tasks to cycle through")
    parser.add_argument("--recycle-after", type=int, default=None, help="engine worker recycling (env option)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=None, help="write the figures here")
    args = parser.parse_args(argv)

    kwargs = {"split": args.split}
    if args.split == "generated":
        kwargs["generator"] = {"num_tasks": args.pool}
    else:
        kwargs["data_dir"] = args.data_dir
    if args.recycle_after is not None:
        kwargs["recycle_after"] = args.recycle_after
    env = gym.make("orsd_gym/ALFWorld-v0", **kwargs)
    n_tasks = len(env.unwrapped.tasks)
    rng = np.random.default_rng(args.seed)
    for k in range(min(n_tasks, args.resets)):  # make / read every task before timing
        env.unwrapped.tasks[k]
    reset_s, step_s, checkpoints = [], [], {}
    start_rss = rss_mib()
    for r in range(args.resets):
        t = time.perf_counter()
        _, info = env.reset(options={"task_id": r % n_tasks})
        reset_s.append(time.perf_counter() - t)
        for _ in range(args.steps):
            action = info["admissible_actions"][int(rng.integers(len(info["admissible_actions"])))]
            t = time.perf_counter()
            _, _, terminated, truncated, info = env.step(action)
            step_s.append(time.perf_counter() - t)
            if terminated or truncated:
                break
        if r + 1 in (1, 25, 50, 100, 150, 200) or r + 1 == args.resets:
            checkpoints[r + 1] = rss_mib()
    env.close()

    def pct(xs, q):
        return float(np.percentile(xs, q)) * 1000

    print(f"ALFWorld split={args.split} tasks={n_tasks} resets={args.resets} recycle_after={args.recycle_after}")
    print(f"reset latency ms: median {pct(reset_s, 50):.0f}  p90 {pct(reset_s, 90):.0f}  max {max(reset_s) * 1000:.0f}")
    print(f"step  latency ms: median {pct(step_s, 50):.1f}  p90 {pct(step_s, 90):.1f}  (n={len(step_s)})")
    print(f"RSS MiB before first reset: {start_rss:.0f}")
    print("RSS MiB after N resets: " + "  ".join(f"{n}: {v:.0f}" for n, v in checkpoints.items()))
    first_half = [v for n, v in checkpoints.items() if n <= args.resets // 2]
    growth = list(checkpoints.values())[-1] - (first_half[-1] if first_half else start_rss)
    print(f"RSS growth over the second half: {growth:+.0f} MiB; mean reset {statistics.mean(reset_s) * 1000:.0f} ms")
    if args.json:
        record = {
            "args": vars(args),
            "tasks": n_tasks,
            "reset_ms": {"median": pct(reset_s, 50), "p90": pct(reset_s, 90), "max": max(reset_s) * 1000},
            "step_ms": {"median": pct(step_s, 50), "p90": pct(step_s, 90), "count": len(step_s)},
            "rss_mib_before": start_rss,
            "rss_mib_after_resets": checkpoints,
            "rss_growth_second_half_mib": growth,
        }
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(record, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
