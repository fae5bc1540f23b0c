"""Credit alignment: does a rubric move credit towards the actions an expert would take?

ORSD's delta (log p(token | rubric) - log p(token)) can be large for any extra text in the
prompt, so its magnitude does not tell a useful rubric from a useless one. On envs that know
the expert's next action (``info["expert_actions"][0]`` with ``expert=True``), what does tell
them apart is *where* delta goes: a rubric that describes the right process should raise the
tokens of actions that agree with the expert more than the tokens of other actions.

    alignment = mean delta on tokens of expert-agreeing actions - mean delta on tokens of other actions

Means are over tokens pooled across all given trajectories (each token counts once, so long
actions weigh more, as they do in the policy gradient).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch

from orsd_gym.envs.base import EXPERT_ACTIONS
from orsd_gym.errors import AlignmentLayoutError
from orsd_gym.rollout.trajectory import Trajectory, TurnSpan


@dataclass
class CreditAlignment:
    """`credit_alignment`'s result (``asdict`` of it is what the function returns)."""

    #: agree_mean - other_mean; None when either side has no token.
    alignment: float | None
    #: Mean delta on the tokens of actions equal to the expert's next action (None: no such token).
    agree_mean: float | None
    #: Mean delta on the tokens of the other actions whose expert action is known.
    other_mean: float | None
    agree_tokens: int
    other_tokens: int
    agree_actions: int
    other_actions: int
    #: Actions taken where the info had no expert plan (expert="reset" after the first step, a
    #: finished plan): counted on neither side.
    unknown_actions: int
    #: Mean |delta| on the tokens of both sides (the magnitude, which alignment is not).
    abs_mean: float | None


def same_action(action: str, expert_action: str) -> bool:
    """Whether an action is the expert's (case and runs of whitespace ignored, as WebShop's
    clicks are case-insensitive and both envs strip actions)."""
    return " ".join(action.lower().split()) == " ".join(expert_action.lower().split())


def credit_alignment(trajectories: Sequence[Trajectory], deltas: Sequence[torch.Tensor]) -> dict[str, Any]:
    """Credit alignment of per-token ``deltas`` (one tensor per trajectory, over its tokens).

    Action k of an episode is compared with ``infos[k]["expert_actions"][0]``, the expert's next
    action in the state where it was taken. In the sequence layout a trajectory's k-th model
    span is action k; in the per-step layout (``trajectory.step`` set) a sample holds the one
    model span of its step. Pass the trajectories whose deltas mean something (those that got a
    rubric): zero deltas of unshaped trajectories would pull both means towards 0.
    """
    if len(trajectories) != len(deltas):
        raise ValueError(f"{len(trajectories)} trajectories but {len(deltas)} delta tensors")
    sums = {True: 0.0, False: 0.0}
    tokens = {True: 0, False: 0}
    actions = {True: 0, False: 0}
    abs_sum = 0.0
    unknown = 0
    for trajectory, delta in zip(trajectories, deltas, strict=True):
        delta = torch.as_tensor(delta, dtype=torch.float64).flatten()
        if delta.numel() != len(trajectory.token_ids):
            raise AlignmentLayoutError(
                f"delta of episode {trajectory.episode_id} has {delta.numel()} values for "
                f"{len(trajectory.token_ids)} tokens"
            )
        mask = torch.as_tensor(trajectory.loss_mask, dtype=torch.bool)
        for step, span in model_action_spans(trajectory):
            expert = expert_next_action(trajectory, step)
            if expert is None:
                unknown += 1
                continue
            agrees = same_action(trajectory.actions[step], expert)
            values = delta[span.start : span.end][mask[span.start : span.end]]
            sums[agrees] += float(values.sum())
            abs_sum += float(values.abs().sum())
            tokens[agrees] += int(values.numel())
            actions[agrees] += 1
    agree_mean = sums[True] / tokens[True] if tokens[True] else None
    other_mean = sums[False] / tokens[False] if tokens[False] else None
    total = tokens[True] + tokens[False]
    return asdict(
        CreditAlignment(
            alignment=None if agree_mean is None or other_mean is None else agree_mean - other_mean,
            agree_mean=agree_mean,
            other_mean=other_mean,
            agree_tokens=tokens[True],
            other_tokens=tokens[False],
            agree_actions=actions[True],
            other_actions=actions[False],
            unknown_actions=unknown,
            abs_mean=abs_sum / total if total else None,
        )
    )


def model_action_spans(trajectory: Trajectory) -> list[tuple[int, TurnSpan]]:
    """(action index, model span) pairs of a trajectory in either layout."""
    spans = trajectory.model_spans()
    if trajectory.step is not None:
        if len(spans) != 1 or trajectory.step >= len(trajectory.actions):
            raise AlignmentLayoutError(
                f"per-step sample {trajectory.step} of episode {trajectory.episode_id} has {len(spans)} model spans "
                f"and the episode {len(trajectory.actions)} actions; expected one span for an existing step"
            )
        return [(trajectory.step, spans[0])]
    if len(spans) != len(trajectory.actions):
        raise AlignmentLayoutError(
            f"episode {trajectory.episode_id} has {len(spans)} model spans but {len(trajectory.actions)} actions; "
            "credit alignment needs one model turn per action (the rollout collector's layout)"
        )
    return list(enumerate(spans))


def expert_next_action(trajectory: Trajectory, step: int) -> str | None:
    info = trajectory.infos[step] if step < len(trajectory.infos) else {}
    plan = info.get(EXPERT_ACTIONS) or []
    return str(plan[0]) if plan else None
