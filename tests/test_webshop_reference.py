"""Replay of the episodes recorded from the original WebShop (unmodified engine, official small
set), read in place from ../shared/data/webshop/reference_transcripts.json: every page must
come out character for character as the original showed it.

Two things are compared only in part, because they depend on what this project reproduces by
design rather than exactly: a results page lists what the search engine ranks (the recording's
search ran on a BM25 stand-in for the original's Java index), so the whole page is compared
where it lists the same products in the same order, and otherwise its header and every product
entry both pages list; and a ranged price is drawn at random per catalog load, so the reward
(and the done page that prints it) is compared for single-price products.
"""

from __future__ import annotations

import json
import re
from collections import Counter

import gymnasium as gym
import pytest

import orsd_gym  # noqa: F401
from orsd_gym.envs.webshop.pages import OBSERVATION_MODES

ENV_ID = "orsd_gym/WebShop-v0"
TRANSCRIPTS = "reference_transcripts.json"
_PRODUCT_LINK = re.compile(r"\[(?:clicked )?button\] (\S+) \[")


@pytest.fixture(scope="module")
def episodes(shared_data):
    path = shared_data / "webshop" / TRANSCRIPTS
    if not path.is_file():
        pytest.skip(f"{path} not found (the reference episodes recorded from the original WebShop)")
    return json.loads(path.read_text())["episodes"]


@pytest.fixture(scope="module")
def envs(shared_data):
    data_dir = str(shared_data / "webshop")
    return {mode: gym.make(ENV_ID, data_dir=data_dir, observation_mode=mode) for mode in OBSERVATION_MODES}


def split_results(observation: str, mode: str) -> tuple[str, dict[str, str]]:
    """A results page as (its header, {asin: its product entry}), entries in page order."""
    if mode == "text":
        entries = observation.split(" [SEP] ")
        start = entries.index("Next >") + 1
        products = {entries[i]: " [SEP] ".join(entries[i : i + 3]) for i in range(start, len(entries), 3)}
        return " [SEP] ".join(entries[:start]), products
    header, *blocks = observation.split("\n\n")
    # Every entry ends its last line with "\n"; only the page's last one keeps it after the split.
    blocks = [block.removesuffix("\n") for block in blocks]
    return header, {_PRODUCT_LINK.match(block).group(1): block for block in blocks}


def compare_results(ours: str, recorded: str, mode: str) -> tuple[str, list[str]]:
    """("exact" or "entries", the differences found)."""
    our_header, our_products = split_results(ours, mode)
    header, products = split_results(recorded, mode)
    if list(our_products) == list(products):
        return "exact", [] if ours == recorded else ["the page differs"]
    problems = [] if our_header == header else [f"header {our_header!r} != {header!r}"]
    shared = our_products.keys() & products.keys()
    problems += [f"entry {asin}" for asin in shared if our_products[asin] != products[asin]]
    return "entries", problems


@pytest.mark.official_data
def test_reference_episodes_replay_exactly(episodes, envs):
    catalog = envs["text"].unwrapped.catalog
    mismatches: list[str] = []
    compared: Counter[str] = Counter()
    for number, episode in enumerate(episodes):
        env, mode = envs[episode["mode"]], episode["mode"]
        single_price = len(catalog.by_asin[episode["goal"]["asin"]]["pricing"]) == 1
        observation, _ = env.reset(options={"goal": episode["goal"]})
        for step in episode["steps"]:
            where = f"episode {number} ({mode}) action {step['action']!r} ({step['page']} page)"
            reward, terminated, valid = 0.0, False, True
            if step["action"] is not None:
                observation, reward, terminated, _, info = env.step(step["action"])
                valid = info["is_valid_action"]
            if not valid or terminated != step["done"]:
                mismatches.append(f"{where}: valid={valid}, done={terminated} (recorded done={step['done']})")
            if step["page"] == "results":
                how, problems = compare_results(observation, step["obs"], mode)
                compared[f"results ({how})"] += 1
                mismatches += [f"{where}: {problem}" for problem in problems]
                continue
            if step["page"] == "done":
                if single_price and reward != step["reward"]:
                    mismatches.append(f"{where}: reward {reward} != {step['reward']}")
                if reward != step["reward"]:
                    continue  # the done page prints the reward
            compared[step["page"]] += 1
            if observation != step["obs"]:
                mismatches.append(f"{where}: the page differs")
    assert not mismatches, "\n".join(mismatches)
    assert compared["item"] and compared["sub"] and compared["done"] and compared["results (exact)"], compared
