"""What the model is told about an env: system prompt, first message, observation messages.

Each env says how it is presented (its `EnvPrompt`: `orsd_gym.envs.presentation`); an env that
says nothing gets the generic default, built from ``info["task"]`` and the admissible actions,
so a newly registered env works at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from orsd_gym.envs.presentation import EnvPrompt, prompt_for, register_env_prompt

#: `prompt_for(env_id)`: how an env presents itself; `register_env_prompt` overrides it.
__all__ = ["EnvPrompt", "prompt_for", "register_env_prompt"]


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
    """A per-step sample's user turn: the task (unless the observation already states it, as
    WebShop's pages do), the last H (observation, action) steps, the current observation."""
    parts = [f"Your task is: {task}"] if task and task not in observation else []
    if history:
        lines = "\n".join(f"Observation: {obs}\nAction: {action}" for obs, action in history)
        parts.append(f"Your last {len(history)} steps:\n{lines}")
    parts.append("Current observation:\n" + observation + admissible_block(prompt, info))
    return "\n\n".join(parts)
