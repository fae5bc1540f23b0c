"""Rubric bundles written from an env's expert plan: the positive control of ORSD.

A bundle made here is known to describe a right way of solving the task, because it restates
the privileged plan the env's expert computes at the task's start (``info["expert_actions"]`` of
the reset info; make the env with ``expert=True`` or ``expert="reset"``). No real run has such
information; it exists to show what ORSD's credit assignment does with a rubric that is right.

The env says how its plan reads as criteria (`TextEnv.expert_criteria`,
`orsd_gym.envs.presentation`): short, yes/no checkable statements about the process that name
the task's objects and places, so they can only help on the task they were written for. An env
that says nothing gets some of the plan's actions themselves, and their order. When a plan
has more criteria than ``max_criteria``, the env's most telling ones are kept, in plan order.
"""

from __future__ import annotations

from collections.abc import Sequence

from orsd_gym.envs.base import EXPERT_ACTIONS
from orsd_gym.envs.presentation import expert_criteria_for
from orsd_gym.errors import MissingExpertPlanError
from orsd_gym.rollout.trajectory import Trajectory


def expert_bundle(env_id: str | None, plan: Sequence[str], max_criteria: int) -> list[str]:
    """At most ``max_criteria`` process criteria restating the expert ``plan`` of a task of env
    ``env_id``, as that env reads its plans.

    ``plan`` is the expert's actions from the task's start. An empty plan gives no criteria
    (the task is solved at reset, or the env's expert has nothing to say).
    """
    if max_criteria < 1:
        raise ValueError(f"max_criteria must be >= 1, got {max_criteria}")
    actions = [" ".join(str(a).split()) for a in plan if str(a).strip()]
    if not actions:
        return []
    candidates = expert_criteria_for(env_id, actions, max_criteria)
    kept = sorted(candidates, key=lambda c: (c.priority, c.position))[:max_criteria]
    texts = [c.text for c in sorted(kept, key=lambda c: (c.position, c.priority))]
    return list(dict.fromkeys(texts))


def expert_bundle_for(trajectory: Trajectory, max_criteria: int) -> list[str]:
    """`expert_bundle` from the plan in a trajectory's reset info (``infos[0]``)."""
    first = trajectory.infos[0] if trajectory.infos else {}
    if EXPERT_ACTIONS not in first:
        raise MissingExpertPlanError(
            f"trajectory of task {trajectory.task_id} ({trajectory.env_id}) has no info['{EXPERT_ACTIONS}'] at "
            "reset; make the env with expert=True or expert='reset' (e.g. env.kwargs.expert: reset)"
        )
    return expert_bundle(trajectory.env_id, first[EXPERT_ACTIONS], max_criteria)
