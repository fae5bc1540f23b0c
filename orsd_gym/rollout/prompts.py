"""What the model is told about an env: system prompt, first message, observation messages.

`ENV_PROMPTS` maps an env id to its `EnvPrompt`; an unregistered env gets the generic default,
built from ``info["task"]`` and the admissible actions, so a newly registered env works at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class EnvPrompt:
    """How observations of one env are presented to the model."""

    instructions: str = "You are an agent in a text environment. Complete the task by sending one action per turn."
    #: Append the env's admissible actions (when it reports them) to each observation.
    show_admissible: bool = True
    max_admissible: int = 40
    #: What ``on_unparsable="noop"`` sends.
    noop_action: str = "look"
    #: Show the admissible actions as a numbered list to choose from (what the "admissible"
    #: action format asks for: small models copy from a list far more reliably than they
    #: compose an action).
    numbered: bool = False


ENV_PROMPTS: dict[str, EnvPrompt] = {
    "orsd_gym/GuessNumber-v0": EnvPrompt(
        "You are playing a guessing game. Find the hidden number with as few guesses as possible. "
        "Actions look like 'guess 7'; after each guess you are told to go higher or lower.",
        show_admissible=False,
        noop_action="guess 1",
    ),
    "orsd_gym/ALFWorld-v0": EnvPrompt(
        "You are an agent in a household. Complete the task using text actions such as 'go to cabinet 1', "
        "'open drawer 2', 'take apple 1 from countertop 1', 'put apple 1 in/on fridge 1', 'heat X with microwave 1', "
        "'cool X with fridge 1', 'clean X with sinkbasin 1', 'use desklamp 1', 'look', 'inventory'.",
        noop_action="look",
    ),
    "orsd_gym/WebShop-v0": EnvPrompt(
        "You are shopping on a website for a product that matches the instruction. "
        "Actions are 'search[keywords]' on the search page and 'click[button or product]' elsewhere; "
        "buy the best match with click[Buy Now].",
        noop_action="click[< Prev]",
    ),
}


def register_env_prompt(env_id: str, prompt: EnvPrompt) -> None:
    """Set the prompt used for ``env_id`` (overrides the built-in one)."""
    ENV_PROMPTS[env_id] = prompt


def env_prompt(env_id: str | None) -> EnvPrompt:
    return ENV_PROMPTS.get(env_id or "", EnvPrompt())


def system_prompt(prompt: EnvPrompt, format_instructions: str) -> str:
    return f"{prompt.instructions}\n\n{format_instructions}"


def admissible_block(prompt: EnvPrompt, info: dict[str, Any]) -> str:
    actions: Sequence[str] = info.get("admissible_actions") or []
    if not prompt.show_admissible or not actions:
        return ""
    shown = list(actions[: prompt.max_admissible])
    more = f" (and {len(actions) - len(shown)} more)" if len(actions) > len(shown) else ""
    if prompt.numbered:
        choices = "\n".join(f"{i}. {action}" for i, action in enumerate(shown, start=1))
        return f"\n\nChoose one of these actions{more}:\n{choices}\n\nAnswer with the action text only."
    return "\n\nAdmissible actions: " + " | ".join(shown) + more


def first_message(prompt: EnvPrompt, observation: str, info: dict[str, Any]) -> str:
    """The first user turn: the task (unless the observation already states it) and the observation."""
    task = str(info.get("task", "")).strip()
    head = f"Your task is: {task}\n\n" if task and task not in observation else ""
    return head + observation + admissible_block(prompt, info)


def observation_message(prompt: EnvPrompt, observation: str, info: dict[str, Any]) -> str:
    return observation + admissible_block(prompt, info)


def per_step_message(
    prompt: EnvPrompt, task: str, history: Sequence[tuple[str, str]], observation: str, info: dict[str, Any]
) -> str:
    """A per-step sample's user turn: the task, the last H (observation, action) steps, the current observation."""
    parts = [f"Your task is: {task}"]
    if history:
        lines = "\n".join(f"Observation: {obs}\nAction: {action}" for obs, action in history)
        parts.append(f"Your last {len(history)} steps:\n{lines}")
    parts.append("Current observation:\n" + observation + admissible_block(prompt, info))
    return "\n\n".join(parts)
