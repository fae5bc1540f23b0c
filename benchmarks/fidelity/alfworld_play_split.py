"""Play a whole official ALFWorld split with the planner's expert actions; print wins and timing.

python benchmarks/fidelity/alfworld_play_split.py --data-dir $ALFWORLD_DATA --split valid_seen
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import defaultdict

import gymnasium as gym
from rich.console import Console
from rich.progress import track
from rich.table import Table

import orsd_gym  # noqa: F401
from orsd_gym.envs.alfworld.expert import play_expert


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=None, help="official data root (default $ALFWORLD_DATA)")
    parser.add_argument("--split", default="valid_seen")
    parser.add_argument("--limit", type=int, default=None, help="play only the first N games")
    parser.add_argument("--jsonl", default=None, help="write one JSON line per game here")
    parser.add_argument("--json", default=None, help="write the summary (per task type and overall) here")
    args = parser.parse_args(argv)

    env = gym.make("orsd_gym/ALFWorld-v0", split=args.split, data_dir=args.data_dir, expert=True)
    n = len(env.unwrapped.tasks) if args.limit is None else min(args.limit, len(env.unwrapped.tasks))
    start = time.perf_counter()
    episodes = [play_expert(env, k) for k in track(range(n), description=f"playing {args.split}")]
    total = time.perf_counter() - start
    env.close()

    if args.jsonl:
        with open(args.jsonl, "w") as f:
            for e in episodes:
                f.write(json.dumps(e.__dict__) + "\n")
    by_type = defaultdict(list)
    for e in episodes:
        by_type[e.task_type].append(e)
    table = Table(title=f"ALFWorld {args.split}: planner expert")
    for col in ("task type", "games", "won", "mean steps", "mean s/game"):
        table.add_column(col)
    for task_type, eps in sorted(by_type.items()):
        table.add_row(
            task_type,
            str(len(eps)),
            str(sum(e.won for e in eps)),
            f"{statistics.mean(e.steps for e in eps):.1f}",
            f"{statistics.mean(e.seconds for e in eps):.2f}",
        )
    wins = sum(e.won for e in episodes)
    if args.json:
        summary = {
            task_type: {
                "games": len(eps),
                "won": sum(e.won for e in eps),
                "mean_steps": statistics.mean(e.steps for e in eps),
            }
            for task_type, eps in sorted(by_type.items())
        }
        record = {"split": args.split, "games": n, "won": wins, "seconds": total, "by_type": summary}
        with open(args.json, "w") as f:
            json.dump(record, f, indent=1)
    table.add_row("all", str(n), str(wins), f"{statistics.mean(e.steps for e in episodes):.1f}", f"{total / n:.2f}")
    Console().print(table)
    print(
        f"won {wins}/{n} ({100 * wins / n:.1f}%) in {total:.1f} s total, "
        f"max {max(e.seconds for e in episodes):.2f} s/game"
    )
    return 0 if wins == n else 1


if __name__ == "__main__":
    sys.exit(main())
