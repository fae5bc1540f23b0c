"""WebShop's privileged expert (`orsd_gym.envs.webshop.expert`): mean score and success rate.

    .venv/bin/python benchmarks/fidelity/webshop_expert.py --json webshop_expert.json   # about 1 min

Plays every test goal (the first 500 of the official small set at ../shared/data/webshop, or
``--data-dir``) and the embedded synthetic catalog's test goals, following the expert's plan
(replanned from the session every step, as ``expert=True`` does), with two searches: the goal's
instruction text (the expert's) and the goal's category query (``goal["query"]``), which the
issue first proposed. The score is an upper bound of what that search allows: below 1.0 where
the search does not list the goal product within its 50 results. Under the benchmark's
reward ("pairs" option matching) buying exactly the goal's product and options scores below
1.0 for some goals (a colour such as "black2070" is compared as its (name, value) pair), so the
instruction search is also measured with ``option_matching="values"``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

import orsd_gym  # noqa: F401  (registers the env)
from orsd_gym.envs.webshop.expert import WebShopExpert, expert_query

ROOT = Path(__file__).resolve().parents[2]
SHARED_WEBSHOP = ROOT.parent / "shared" / "data" / "webshop"
SEARCHES = {"instruction": expert_query, "category_query": lambda goal: goal["query"]}
#: (search, option matching) pairs measured on each catalog.
VARIANTS = (("instruction", "pairs"), ("category_query", "pairs"), ("instruction", "values"))


def play(env: gym.Env, goal_index: int, search: str) -> dict[str, Any]:
    """One episode of goal ``goal_index`` following the expert that searches with ``search``."""
    _, info = env.reset(options={"goal_index": goal_index})
    shop = env.unwrapped
    goal = shop.goals[goal_index]
    expert = WebShopExpert(shop.shop_data.engine, goal, query=SEARCHES[search](goal))
    steps, terminated, truncated, reward = 0, False, False, 0.0
    while not (terminated or truncated):
        plan = expert.plan(shop.session)
        if not plan:
            break
        _, reward, terminated, truncated, info = env.step(plan[0])
        steps += 1
    rank = expert.results.index(goal["asin"]) if goal["asin"] in expert.results else None
    return {"score": float(reward), "won": bool(info["won"]), "steps": steps, "found": expert.finds_goal, "rank": rank}


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    found = [r for r in rows if r["found"]]
    return {
        "goals": len(rows),
        "mean_score": float(np.mean([r["score"] for r in rows])),
        "success_rate": float(np.mean([r["won"] for r in rows])),
        "found_in_results": len(found) / len(rows),
        "found_on_page_1": sum(1 for r in found if r["rank"] < 10) / len(rows),
        "mean_score_when_found": float(np.mean([r["score"] for r in found])) if found else None,
        "success_when_found": float(np.mean([r["won"] for r in found])) if found else None,
        "mean_steps": float(np.mean([r["steps"] for r in rows])),
        "max_steps": int(max(r["steps"] for r in rows)),
    }


def measure(label: str, env_kwargs: dict[str, Any], goals: int | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for search, matching in VARIANTS:
        env = gym.make("orsd_gym/WebShop-v0", goal_split="test", option_matching=matching, **env_kwargs)
        out["data_source"] = env.unwrapped.data_source
        n = len(env.unwrapped.goals) if goals is None else min(goals, len(env.unwrapped.goals))
        started = time.perf_counter()
        summary = summarise([play(env, k, search) for k in range(n)])
        summary["seconds"] = time.perf_counter() - started
        env.close()
        out[f"{search}/{matching}"] = summary
        print(
            f"{label:>9} | search={search:<14} | {matching:<6} | goals {summary['goals']}"
            f" | mean score {summary['mean_score']:.3f}"
            f" | success {summary['success_rate']:.3f} | found in 50 results {summary['found_in_results']:.3f}"
            f" | success when found {summary['success_when_found']:.3f} | mean steps {summary['mean_steps']:.1f}"
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", default=str(SHARED_WEBSHOP), help="official WebShop data (small set)")
    parser.add_argument("--goals", type=int, default=None, help="play only the first N test goals")
    parser.add_argument("--json", type=Path, default=None, help="write the results here")
    args = parser.parse_args()
    results = {
        "official_small": measure("official", {"data_dir": args.data_dir}, args.goals),
        "synthetic": measure("synthetic", {"data_dir": None}, args.goals),
    }
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
