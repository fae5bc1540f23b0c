"""The "admissible" action format: free text and list numbers mapped onto the env's legal actions."""

from __future__ import annotations

import pytest

from orsd_gym.rollout import prompts
from orsd_gym.rollout.actions import PARSERS, choose_action, match_admissible

ADMISSIBLE = ["go to shelf 1", "go to sidetable 1", "take cellphone 1 from sidetable 1", "look", "inventory"]


@pytest.mark.parametrize(
    "text, expected",
    [
        ("go to shelf 1", "go to shelf 1"),
        ("  Go to   SHELF 1 ", "go to shelf 1"),
        ("I will go to sidetable 1 now.", "go to sidetable 1"),
        ("take cellphone 1 from sidetable 1", "take cellphone 1 from sidetable 1"),
        ("goto shelf1", "go to shelf 1"),
        ("banana bread", None),
    ],
)
def test_match_admissible(text, expected):
    assert match_admissible(text, ADMISSIBLE) == expected


@pytest.mark.parametrize(
    "text, expected",
    [
        ("2", "go to sidetable 1"),
        ("4.", "look"),
        ("1. go to sidetable 1", "go to sidetable 1"),  # the text wins over the number
        ("1. It's a kitchen.", "go to shelf 1"),  # unmatched text: the list number decides
        ("9. nothing", None),
        ("<action>inventory</action>", "inventory"),
    ],
)
def test_admissible_parser_resolves_numbers_and_text(text, expected):
    assert PARSERS["admissible"].resolve(text, ADMISSIBLE) == expected


def test_choose_action_flags_unresolvable_turns():
    parser = PARSERS["admissible"]
    ok = choose_action("2", parser, "as_is", "look", ADMISSIBLE)
    assert (ok.action, ok.format_valid) == ("go to sidetable 1", True)
    bad = choose_action("dance", parser, "noop", "look", ADMISSIBLE)
    assert (bad.action, bad.format_valid) == ("look", False)
    # Without an admissible list the parser falls back to plain extraction (last line).
    plain = choose_action("thinking\nopen door", parser, "as_is", "look", ())
    assert (plain.action, plain.format_valid) == ("open door", True)


def test_numbered_prompt_lists_choices():
    prompt = prompts.EnvPrompt(numbered=True)
    block = prompts.admissible_block(prompt, {"admissible_actions": ADMISSIBLE[:2]})
    assert "1. go to shelf 1\n2. go to sidetable 1" in block


def test_choosing_from_the_list_fills_the_envs_action_templates(policy, monkeypatch):
    """WebShop lists search[<your query>] on its search page; a model that answers with a list
    number must search for the task, not for the words "your query"."""
    from orsd_gym.envs.webshop.shop import SEARCH_TEMPLATE
    from orsd_gym.rollout import RolloutOptions, Teacher, collect

    monkeypatch.delenv("WEBSHOP_DATA", raising=False)  # the embedded synthetic catalog
    options = RolloutOptions(action_format="admissible", max_turns=1)
    [episode] = collect("orsd_gym/WebShop-v0", Teacher(policy, lambda info: "1"), [0], group_size=1, options=options)
    search = f"search[{episode.task}]"
    assert episode.infos[0]["admissible_actions"] == [search]
    assert f"1. {search}" in episode.prompt_messages[-1]["content"]
    assert SEARCH_TEMPLATE not in episode.prompt_messages[-1]["content"]
    assert episode.actions == [search] and episode.format_valid == [True]
    assert episode.infos[1]["is_valid_action"]
    assert any(action.startswith("click[") for action in episode.infos[1]["admissible_actions"])
