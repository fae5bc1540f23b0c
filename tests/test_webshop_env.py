"""The WebShop env: scripted episodes, pages in both observation modes, invalid actions,
reset options, and the text-env contract on the synthetic catalog and the shared data."""

from __future__ import annotations

import re

import gymnasium as gym
import pytest
from contract import (
    assert_info_contract,
    assert_seed_determinism,
    assert_spaces_and_checker,
    assert_task_id_option,
    fuzz_invalid_actions_are_noops,
)

import orsd_gym  # noqa: F401
from orsd_gym.envs.webshop.env import CUSTOM_GOAL_ID
from orsd_gym.envs.webshop.pages import options_json, shown_as_clicked
from orsd_gym.envs.webshop.shop import SEARCH_TEMPLATE
from orsd_gym.errors import GoalError, TaskSelectionError

ENV_ID = "orsd_gym/WebShop-v0"


@pytest.fixture(scope="module")
def data_dir(shared_data):
    return str(shared_data / "webshop")


@pytest.fixture(autouse=True)
def _no_env_data(monkeypatch):
    monkeypatch.delenv("WEBSHOP_DATA", raising=False)


def play_to_target(env, goal, *, query=None):
    """Search for the target, page until it shows, open it, choose the goal's options, buy."""
    obs, reward, terminated, truncated, info = env.step(f"search[{query or goal['name']}]")
    assert info["is_valid_action"]
    asin = goal["asin"].lower()
    for _ in range(5):  # 50 results, 10 per page
        if asin in info["available_actions"]["clickables"]:
            break
        obs, reward, terminated, truncated, info = env.step("click[next >]")
    else:
        pytest.fail(f"{goal['asin']} is not among the 50 results for {query or goal['name']!r}")
    obs, reward, terminated, truncated, info = env.step(f"click[{asin}]")
    options = goal["goal_options"].values() if isinstance(goal["goal_options"], dict) else goal["goal_options"]
    for value in options:
        obs, reward, terminated, truncated, info = env.step(f"click[{value}]")
        assert info["is_valid_action"], value
    return env.step("click[buy now]")


# --------------------------------------------------------------------------- shared data
@pytest.mark.official_data
@pytest.mark.parametrize("goal_index", [0, 1, 2, 3, 4, 123, 499])
def test_scripted_episodes_on_shared_data_score_one(data_dir, goal_index):
    env = gym.make(ENV_ID, data_dir=data_dir)
    assert len(env.unwrapped.goals) == 500
    _, info = env.reset(options={"goal_index": goal_index})
    goal = env.unwrapped.goals[goal_index]
    assert info["task_id"] == goal_index and info["task"] == goal["instruction_text"]
    obs, reward, terminated, truncated, info = play_to_target(env, goal)
    assert terminated and not truncated
    assert reward == 1.0 and info["won"] is True and info["score"] == 1.0
    assert info["reward_details"]["purchased_asin"] == goal["asin"]
    assert obs.startswith("Thank you for shopping with us!") and "Your score (min 0.0, max 1.0) [SEP] 1.0" in obs


@pytest.mark.official_data
def test_splits_on_shared_data(data_dir):
    sizes = {
        split: len(gym.make(ENV_ID, data_dir=data_dir, goal_split=split).unwrapped.goals)
        for split in ("test", "train", "all")
    }
    assert sizes == {"test": 500, "train": 6410, "all": 6910}
    train = gym.make(ENV_ID, data_dir=data_dir, goal_split="train").unwrapped
    all_goals = gym.make(ENV_ID, data_dir=data_dir, goal_split="all").unwrapped
    assert train.goals[0] is all_goals.goals[500]


@pytest.mark.official_data
def test_text_pages_on_shared_data(data_dir):
    env = gym.make(ENV_ID, data_dir=data_dir)
    obs, info = env.reset(options={"goal_index": 0})
    goal = env.unwrapped.goals[0]
    instruction = goal["instruction_text"]
    assert obs == f"WebShop [SEP] Instruction: [SEP] {instruction} [SEP] Search"
    assert info["available_actions"] == {"has_search_bar": True, "clickables": ["search"]}
    assert info["admissible_actions"] == [SEARCH_TEMPLATE]

    obs, _, _, _, info = env.step("search[decorative pillows]")
    head = f"Instruction: [SEP] {instruction} [SEP] Back to Search [SEP] Page 1 (Total results: 50) [SEP] Next > [SEP] "
    assert obs.startswith(head)
    clickables = info["available_actions"]["clickables"]
    assert info["available_actions"]["has_search_bar"] is False
    assert clickables[:2] == ["back to search", "next >"] and len(clickables) == 12
    shown = env.unwrapped.session.state.results[:10]
    assert clickables[2:] == [a.lower() for a in shown]
    catalog = env.unwrapped.catalog.by_asin
    entries = obs[len(head) :].split(" [SEP] ")
    assert entries[:3] == [shown[0], catalog[shown[0]]["Title"].strip(), catalog[shown[0]]["Price"]]
    assert all(re.fullmatch(r"B[0-9A-Z]{9}", e) for e in entries[::3])
    assert "click[next >]" in info["admissible_actions"] and SEARCH_TEMPLATE not in info["admissible_actions"]

    obs, _, _, _, info = env.step("click[next >]")
    assert "Page 2 (Total results: 50) [SEP] < Prev [SEP] Next > [SEP] " in obs
    assert info["available_actions"]["clickables"][:3] == ["back to search", "< prev", "next >"]
    page2 = env.unwrapped.session.state.results[10:20]
    obs, _, _, _, info = env.step(f"click[{page2[0]}]")  # upper-case works: arguments are lower-cased
    product = catalog[page2[0]]
    assert obs.startswith(f"Instruction: [SEP] {instruction} [SEP] Back to Search [SEP] < Prev [SEP] ")
    assert obs.endswith(
        f"{product['Title'].strip()} [SEP] Price: {product['Price']} [SEP] Rating: N.A. "
        "[SEP] Description [SEP] Features [SEP] Reviews [SEP] Buy Now"
    )
    option_values = [v for values in product["options"].values() for v in values]
    assert info["available_actions"]["clickables"][:6] == [
        "back to search",
        "< prev",
        "description",
        "features",
        "reviews",
        "buy now",
    ]
    assert set(info["available_actions"]["clickables"][6:]) == set(option_values)

    obs, _, _, _, info = env.step("click[features]")
    bullets = "".join(f" [SEP] {b.strip()}" for b in product["BulletPoints"])  # an empty bullet is an empty entry
    assert obs == f"Instruction: [SEP] {instruction} [SEP] Back to Search [SEP] < Prev{bullets}"
    assert info["available_actions"]["clickables"] == ["back to search", "< prev"]
    env.step("click[< prev]")
    obs, _, _, _, info = env.step("click[description]")
    assert obs.endswith(f"< Prev [SEP] {product['Description'].strip()}") or not product["Description"].strip()
    env.step("click[< prev]")
    obs, _, _, _, _ = env.step("click[reviews]")
    assert obs == f"Instruction: [SEP] {instruction} [SEP] Back to Search [SEP] < Prev"  # no reviews in the data
    env.step("click[< prev]")
    obs, _, _, _, _ = env.step("click[< prev]")  # item -> its results page
    assert "Page 2 (Total results: 50)" in obs
    obs, _, _, _, info = env.step("click[back to search]")
    assert obs.startswith("WebShop [SEP] Instruction:") and info["available_actions"]["has_search_bar"]


@pytest.mark.official_data
def test_rich_pages_and_option_selection(data_dir):
    env = gym.make(ENV_ID, data_dir=data_dir, observation_mode="text_rich")
    obs, _ = env.reset(options={"goal_index": 0})
    goal = env.unwrapped.goals[0]
    assert obs == f"WebShop\nInstruction: \n{goal['instruction_text']}\n[button] Search [button_]\n"
    obs, *_ = env.step(f"search[{goal['name']}]")
    assert "[button] Back to Search [button_]\n" in obs and "\nPage 1 (Total results: 50)\n" in obs
    assert f"\n[button] {goal['asin']} [button_]\n" in obs
    env.step(f"click[{goal['asin']}]")
    name, values = next(iter(env.unwrapped.catalog.by_asin[goal["asin"]]["options"].items()))
    assert values[1] == "18 x 18-inch" and values[-1] == '40" x 40"'
    env.step(f"click[{values[-1]}]")
    obs, *_ = env.step(f"click[{values[1]}]")  # the last click per option name wins
    assert env.unwrapped.session.state.options[name] == values[1]
    assert obs.startswith(f"You have clicked {values[1]}.\n")
    assert f"\n{name}\n" in obs and f"  [clicked button] {values[1]} [clicked button_]\n" in obs
    assert f"  [button] {values[-1]} [button_]\n" in obs
    # As in the benchmark, a chosen value that JSON escapes (here its quotes) is never shown clicked.
    obs, *_ = env.step(f"click[{values[-1]}]")
    assert env.unwrapped.session.state.options[name] == values[-1]
    assert "clicked" not in obs and f"  [button] {values[-1]} [button_]\n" in obs
    assert "[button] Buy Now [button_]" in obs
    obs, *_ = env.step("click[< prev]")  # back on the results page, the visited product is marked
    assert f"\n[clicked button] {goal['asin']} [clicked button_]\n" in obs


@pytest.mark.official_data
def test_text_pages_keep_non_breaking_spaces(data_dir):
    env = gym.make(ENV_ID, data_dir=data_dir)
    catalog = env.unwrapped.catalog
    product = next(p for p in catalog.products if "a1-wine\u00a0red" in p["options"].get("color", []))
    env.reset(options={"goal_index": 0})
    env.step(f"search[{product['Title']}]")
    obs, *_ = env.step(f"click[{product['asin']}]")
    assert " [SEP] a1-wine\u00a0red [SEP] " in obs and env.observation_space.contains(obs)
    obs, *_, info = env.step("click[a1-wine\u00a0red]")
    assert info["is_valid_action"] and env.unwrapped.session.state.options["color"] == "a1-wine\u00a0red"


def test_options_shown_as_clicked_follow_the_benchmarks_url_test():
    chosen = {"color": "navy | white", "size": '52"w'}
    assert shown_as_clicked("navy | white", "", chosen)
    assert not shown_as_clicked('52"w', "", chosen)  # json.dumps escapes the quote
    assert not shown_as_clicked("a1-wine\u00a0red", "", {"color": "a1-wine\u00a0red"})  # ... and non-ASCII
    assert shown_as_clicked("size", "", chosen)  # an option name in quotes
    assert shown_as_clicked("large", 'shirt "large"', {})  # the query is part of the URL


def test_done_page_prints_options_as_flasks_tojson():
    assert options_json({"size": "x<y", "color": "it's"}) == '{"color": "it\\u0027s", "size": "x\\u003cy"}'


@pytest.mark.official_data
def test_shared_data_contract(data_dir):
    env = gym.make(ENV_ID, data_dir=data_dir)
    assert_spaces_and_checker(env)
    assert_task_id_option(env)
    assert_seed_determinism(lambda: gym.make(ENV_ID, data_dir=data_dir))
    fuzz_invalid_actions_are_noops(env, max_examples=30)


@pytest.mark.official_data
def test_human_goals_episode(data_dir):
    env = gym.make(ENV_ID, data_dir=data_dir, human_goals=True, goal_split="all")
    goals = env.unwrapped.goals
    assert 0 < len(goals) <= 13
    env.reset(options={"goal_index": 0})
    _, reward, terminated, _, info = play_to_target(env, goals[0])
    assert terminated and 0.0 <= reward <= 1.0 and info["score"] == reward


# --------------------------------------------------------------------------- synthetic catalog
def test_default_is_the_labelled_synthetic_catalog():
    env = gym.make(ENV_ID)
    assert "synthetic" in env.unwrapped.data_source
    assert len(env.unwrapped.goals) == 500
    assert env.spec.max_episode_steps == 15


def test_synthetic_contract():
    env = gym.make(ENV_ID)
    assert_spaces_and_checker(env)
    assert_task_id_option(env)
    assert_seed_determinism(lambda: gym.make(ENV_ID))
    fuzz_invalid_actions_are_noops(env, max_examples=40)
    rich = gym.make(ENV_ID, observation_mode="text_rich")
    assert_seed_determinism(lambda: gym.make(ENV_ID, observation_mode="text_rich"))
    fuzz_invalid_actions_are_noops(rich, max_examples=20)


@pytest.mark.parametrize("goal_index", [0, 7, 250])
def test_scripted_episodes_on_synthetic_catalog(goal_index):
    env = gym.make(ENV_ID, goal_split="all")
    env.reset(options={"goal_index": goal_index})
    goal = env.unwrapped.goals[goal_index]
    _, reward, terminated, _, info = play_to_target(env, goal)
    assert terminated and reward == 1.0 and info["won"]


def test_invalid_actions_are_noops_on_every_page():
    env = gym.make(ENV_ID)
    obs, info = env.reset(seed=0)
    goal = env.unwrapped.goals[info["task_id"]]
    for action in [
        "click[search]",
        "click[buy now]",
        "click[next >]",
        "search[]",
        "search[   ]",
        "buy",
        "",
        "click[]",
        "Click[search]",
        "search [x]",
        "click[b000000000]",
    ]:
        out = env.step(action)
        assert out[0] == obs and out[1] == 0.0 and not out[2] and out[4]["is_valid_action"] is False, action
    obs, *_ = env.step(f"  search[{goal['name']}]  ")  # surrounding whitespace is tolerated
    assert "Total results" in obs
    for action in [f"search[{goal['name']}]", "click[buy now]", "click[description]", "click[< prev]"]:
        out = env.step(action)
        assert out[0] == obs and out[4]["is_valid_action"] is False, action
    obs, *_ = env.step(f"click[{goal['asin']}]")
    for action in ["click[next >]", "click[not an option]", "search[shoes]"]:
        out = env.step(action)
        assert out[0] == obs and out[4]["is_valid_action"] is False, action
    *_, terminated, _, info = env.step("click[buy now]")
    assert terminated
    obs_done = env.unwrapped.session.observation("text")
    out = env.step("click[back to search]")
    assert out[0] == obs_done and out[1] == 0.0 and out[2] and out[4]["is_valid_action"] is False


def test_a_repeated_action_on_an_unchanged_page_makes_no_progress():
    """``info["no_progress"]`` (what the WebShop presets' reward penalises): the previous action
    again on a page it left as it was, whether the env accepted it or not."""
    env = gym.make(ENV_ID, goal_split="all")
    env.reset(options={"goal_index": 0})
    goal = env.unwrapped.goals[0]
    option = next(iter(goal["goal_options"].values()))
    script = [
        (f"search[{goal['name']}]", True, False),
        (f"search[{goal['name']}]", False, True),  # no search bar on the results page: unchanged
        ("click[next >]", True, False),
        ("click[< prev]", True, False),
        (f"click[{goal['asin'].lower()}]", True, False),
        (f"click[{option}]", True, False),  # the option is now shown as chosen
        (f"click[{option}]", True, True),  # chosen again: accepted, and the page is the same
        ("click[description]", True, False),
        ("click[description]", False, True),
    ]
    for action, valid, repeated in script:
        *_, info = env.step(action)
        assert (info["is_valid_action"], info["no_progress"]) == (valid, repeated), action


def test_wrong_product_scores_less_than_one():
    env = gym.make(ENV_ID, goal_split="all")
    env.reset(options={"goal_index": 3})
    goal = env.unwrapped.goals[3]
    _, _, _, _, info = env.step(f"search[{goal['name']}]")
    other = next(c for c in info["available_actions"]["clickables"][2:] if c != goal["asin"].lower())
    env.step(f"click[{other}]")
    _, reward, terminated, _, info = env.step("click[buy now]")
    assert terminated and reward < 1.0 and info["won"] is False and info["score"] == reward


def test_reset_options_goal_index_task_id_and_custom_goal():
    env = gym.make(ENV_ID)
    goals = env.unwrapped.goals
    _, info = env.reset(options={"goal_index": 5})
    assert info["task_id"] == 5 and info["task"] == goals[5]["instruction_text"]
    _, info = env.reset(options={"task_id": 6})
    assert info["task_id"] == 6
    custom = {**goals[9], "instruction_text": "i want a replayed goal"}
    obs, info = env.reset(seed=4, options={"goal": custom})
    assert info["task_id"] == CUSTOM_GOAL_ID and info["task"] == "i want a replayed goal"
    assert "i want a replayed goal" in obs
    assert_info_contract(info)
    _, reward, *_ = play_to_target(env, custom, query=goals[9]["name"])
    assert reward == 1.0
    _, info = env.reset(seed=4)  # back to the split's goals
    assert info["task_id"] != CUSTOM_GOAL_ID
    with pytest.raises(TaskSelectionError):
        env.reset(options={"goal_index": len(goals)})
    with pytest.raises(TaskSelectionError, match="either"):
        env.reset(options={"goal_index": 1, "task_id": 1})
    with pytest.raises(GoalError, match="lacks"):
        env.reset(options={"goal": {"instruction_text": "x"}})


def test_episode_is_truncated_after_15_steps():
    env = gym.make(ENV_ID)
    env.reset(seed=1)
    outcomes = [env.step("click[search]") for _ in range(15)]
    assert [o[3] for o in outcomes] == [False] * 14 + [True]


def test_bad_constructor_arguments_are_clear_errors(tmp_path):
    with pytest.raises(ValueError, match="observation_mode"):
        gym.make(ENV_ID, observation_mode="html")
    with pytest.raises(ValueError, match="goal_split"):
        gym.make(ENV_ID, goal_split="valid")
    with pytest.raises(ValueError, match="lacks the WebShop catalog files"):
        gym.make(ENV_ID, data_dir=str(tmp_path))
    with pytest.raises(ValueError, match="human_goals"):
        gym.make(ENV_ID, human_goals=True)
    with pytest.raises(ValueError, match="option_matching"):
        gym.make(ENV_ID, option_matching="names")


@pytest.mark.parametrize(("matching", "expected_r_option"), [("pairs", 0.0), (None, 0.0), ("values", 1.0)])
def test_option_matching_switch(matching, expected_r_option):
    env = gym.make(ENV_ID, goal_split="all", **({} if matching is None else {"option_matching": matching}))
    catalog = env.unwrapped.catalog.by_asin
    goal = next(g for g in env.unwrapped.goals if "walnut" in catalog[g["asin"]]["options"].get("color", []))
    # Goal colour "walnut2070" bought as "walnut": the values both normalise to "walnut", but the
    # pair ("color", "walnut2070") stays as it is and shares no token with "walnut".
    custom = {**goal, "goal_options": {"color": "walnut2070"}}
    env.reset(options={"goal": custom})
    env.step(f"search[{goal['name']}]")
    env.step(f"click[{goal['asin']}]")
    env.step("click[walnut]")
    *_, info = env.step("click[buy now]")
    assert info["reward_details"]["option_matching"] == (matching or "pairs")
    assert info["reward_details"]["r_option"] == expected_r_option


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_vector_envs_step_webshop(mode):
    envs = gym.make_vec(ENV_ID, num_envs=2, vectorization_mode=mode)
    try:
        obs, infos = envs.reset(seed=[0, 1])
        assert all(o.startswith("WebShop [SEP] Instruction: [SEP] ") for o in obs)
        obs, rewards, terminated, truncated, infos = envs.step(["search[running shoes]", "click[nothing]"])
        assert "Total results" in obs[0] and obs[1].startswith("WebShop [SEP]")
        assert list(infos["is_valid_action"]) == [True, False]
    finally:
        envs.close()


@pytest.mark.slow
def test_benchmark_script_runs_at_a_tiny_size(tmp_path):
    import json
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "benchmarks" / "perf" / "webshop_perf.py"
    out = tmp_path / "perf.json"
    done = subprocess.run(
        [sys.executable, str(script), "--large-products", "300", "--steps", "30", "--queries", "5", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "search latency" in done.stdout and "KiB/product" in done.stdout
    results = json.loads(out.read_text())
    assert results["large"]["products"] == 300 and results["env_text"]["steps"] == 30
