"""WebShop against the original: how often page 1 of search results lists the reference's
products, and how many purchases the option matching changes.

    .venv/bin/python benchmarks/fidelity/webshop_fidelity.py          # about 10 s on the small set

Reads the official small set and reference_transcripts.json (episodes recorded from the
original environment) at ../shared/data/webshop. Pages other than search results are checked
character for character by tests/test_webshop_reference.py; this script measures what that
test cannot require: search rankings (the recording's search ran on a BM25 stand-in for the
original's Java index) and the reward's "pairs" vs "values" option matching over every goal.
Results are printed and written as JSON (--json).
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

import gymnasium as gym

import orsd_gym  # noqa: F401  (registers the env)
from orsd_gym.envs.webshop.pages import RESULTS_PER_PAGE
from orsd_gym.envs.webshop.reward import OPTION_MATCHING, purchase_reward

ROOT = Path(__file__).resolve().parents[2]
SHARED_WEBSHOP = ROOT.parent / "shared" / "data" / "webshop"
_ASIN = re.compile(r"\bB[0-9A-Z]{9}\b")


def search_agreement(env: gym.Env, episodes: list[dict[str, Any]]) -> dict[str, Any]:
    """Per reference search: do our page 1 and the recorded page 1 list the same products?"""
    rows = []
    for episode in episodes:
        env.reset(options={"goal": episode["goal"]})
        for step in episode["steps"]:
            if step["page"] != "results":
                continue
            env.step(step["action"])
            ours = env.unwrapped.session.state.results[:RESULTS_PER_PAGE]
            recorded = _ASIN.findall(step["obs"])
            rows.append(
                {
                    "same_order": ours == recorded,
                    "same_set": set(ours) == set(recorded),
                    "shared": len(set(ours) & set(recorded)),
                }
            )
            break  # later steps leave the results page
    n = len(rows)
    return {
        "searches": n,
        "same_order": sum(r["same_order"] for r in rows),
        "same_set": sum(r["same_set"] for r in rows),
        "mean_shared": sum(r["shared"] for r in rows) / n,
    }


def reward(env: gym.Env, goal: dict[str, Any], chosen: dict[str, str], matching: str) -> float:
    catalog = env.unwrapped.catalog
    product = catalog.by_asin[goal["asin"]]
    return purchase_reward(product, goal, catalog.prices[goal["asin"]], chosen, matching)[0]


def matching_changes(env: gym.Env, purchases: list[tuple[dict[str, Any], dict[str, str]]]) -> dict[str, Any]:
    """How many of ``purchases`` ((goal, chosen options) of the goal's own product) score
    differently under "pairs" and "values"."""
    changed = [
        (goal, chosen)
        for goal, chosen in purchases
        if len({reward(env, goal, chosen, matching) for matching in OPTION_MATCHING}) > 1
    ]
    return {
        "purchases": len(purchases),
        "changed": len(changed),
        "examples": [goal["goal_options"] for goal, _ in changed[:5]],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=SHARED_WEBSHOP)
    parser.add_argument("--json", type=Path, default=None, help="write the results as JSON here")
    args = parser.parse_args()
    episodes = json.loads((args.data / "reference_transcripts.json").read_text())["episodes"]
    env = gym.make("orsd_gym/WebShop-v0", data_dir=str(args.data), goal_split="all")

    results = {"search_page_1": search_agreement(env, episodes)}
    # The reference purchases: what the recording's done pages say was chosen (text and rich alike).
    recorded = [
        (e["goal"], json.loads(re.search(r"options(?: \[SEP\] |\n)(\{.*?\})", e["steps"][-1]["obs"])[1]))
        for e in episodes
    ]
    results["reference_purchases"] = matching_changes(env, recorded)
    exact = [(goal, dict(goal["goal_options"])) for goal in env.unwrapped.goals]
    results["all_goals_bought_exactly"] = matching_changes(env, exact)

    search = results["search_page_1"]
    print(
        f"search page 1 vs reference: same products in the same order {search['same_order']}/{search['searches']}, "
        f"same set {search['same_set']}/{search['searches']}, {search['mean_shared']:.1f} of 10 shared on average"
    )
    for key in ("reference_purchases", "all_goals_bought_exactly"):
        row = results[key]
        print(f"{key}: reward differs between pairs and values for {row['changed']}/{row['purchases']}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
