"""A thin driver of the real ALFWorld text engine: TextWorld's PDDL env (Fast Downward inside)
with ALFWorld's own name demangler, as ALFWorld's ``AlfredTWEnv`` builds it.

Only this module imports textworld/alfworld, so importing the env package stays light.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from orsd_gym.envs.base import ExpertMode, check_expert_mode
from orsd_gym.errors import EngineError

INVALID_FEEDBACK = "Nothing happens."


INVALID_FEEDBACK = "Nothing happens."


@dataclass
class EngineState:
    """What the engine reports after a reset or an action."""

    feedback: str
    admissible_actions: list[str]
    won: bool
    is_valid_action: bool = True
    #: The planner's plan from this state (engines made with ``expert=True``; with
    #: ``expert="reset"`` only after a reset).
    expert_actions: list[str] | None = field(default=None)


@contextlib.contextmanager
def _argv_preserved() -> Iterator[None]:
    # fast_downward.pddl2sas overwrites sys.argv (its translator reads options from it); put it
    # back so a host program's argument parsing is not affected by loading a game.
    saved = list(sys.argv)
    try:
        yield
    finally:
        sys.argv[:] = saved


# TextWorld's PddlEnv copies and dlopens Fast Downward's library on construction and never
# unloads it (unloading and reloading it crashes the process), so every PddlEnv made is memory
# kept for good. Closed engines park their PddlEnv here and new engines take one, which bounds
# the library copies by the number of engines open at once. Keyed by whether it can plan.
_IDLE_PDDL_ENVS: dict[bool, list[Any]] = {False: [], True: []}


def _take_pddl_env(plans: bool):
    if _IDLE_PDDL_ENVS[plans]:
        return _IDLE_PDDL_ENVS[plans].pop()
    import textworld
    from alfworld.agents.environment.alfred_tw_env import AlfredDemangler
    from textworld.envs.pddl import PddlEnv

    infos = textworld.EnvInfos(won=True, admissible_commands=True, policy_commands=plans)
    with _argv_preserved():
        return AlfredDemangler(PddlEnv(infos), shuffle=False)


class PddlGameEngine:
    """Plays TextWorld PDDL games (``*.tw-pddl``) one at a time.

    Loading the same game again only resets it (GRPO groups replay one task many times).
    ``expert``: True plans after the reset and every action, "reset" after the reset only (the
    planner is the slow part of a step on big rooms), False never.
    """

    def __init__(self, *, expert: ExpertMode = False) -> None:
        self.expert = check_expert_mode(expert)
        self._env = _take_pddl_env(self._plans)
        self._loaded: str | None = None
        self._state: EngineState | None = None

    def reset(self, game_file: str) -> EngineState:
        """Start ``game_file`` from its initial state."""
        if self._env is None:
            raise EngineError("this engine was closed")
        try:
            with _argv_preserved():
                if game_file != self._loaded:
                    self._loaded = None
                    self._env.load(game_file)
                    self._loaded = game_file
                self._plan_next_call(True)
                raw = self._env.reset()
        except (OSError, ValueError, KeyError) as error:
            raise EngineError(f"could not load ALFWorld game {game_file!r}: {error}") from error
        self._state = self._convert(raw, is_valid=True)
        return self._state

    def step(self, command: str) -> EngineState:
        """Apply ``command``; one outside the admissible actions changes nothing."""
        if self._state is None:
            raise EngineError("reset() a game before step()")
        command = command.strip()
        if command not in self._state.admissible_actions:
            # Same feedback as the engine gives, without a (re)planning round-trip; the game
            # state, admissible actions and plan are untouched by construction.
            return EngineState(
                INVALID_FEEDBACK,
                list(self._state.admissible_actions),
                self._state.won,
                is_valid_action=False,
                expert_actions=None if self._state.expert_actions is None else list(self._state.expert_actions),
            )
        with _argv_preserved():
            self._plan_next_call(self.expert is True)
            raw, _, _ = self._env.step(command)
        self._state = self._convert(raw, is_valid=True)
        return self._state

    def close(self) -> None:
        """Hand the engine's PddlEnv (and its library copy) to the next engine made."""
        if self._env is not None:
            _IDLE_PDDL_ENVS[self._plans].append(self._env)
            self._env = None
        self._loaded = None
        self._state = None

    @property
    def _plans(self) -> bool:
        return self.expert is not False

    def _plan_next_call(self, plan: bool) -> None:
        # TextWorld replans in every reset/step whose requested infos include policy_commands;
        # the request is read per call, so "reset" mode turns it off for steps.
        if self._plans:
            self._env.request_infos.policy_commands = plan

    def _convert(self, raw, *, is_valid: bool) -> EngineState:
        plan = list(raw["policy_commands"]) if "policy_commands" in raw else None
        return EngineState(
            str(raw["feedback"]),
            list(raw["admissible_commands"]),
            bool(raw["won"]),
            is_valid_action=is_valid,
            expert_actions=plan,
        )
