"""Privileged replay: re-score the sampled tokens with the rubric in the context.

The trajectory's prompt span is re-rendered from `Trajectory.prompt_messages` with the rubric
inserted (into the system message or the first user message, by a template); everything after
the prompt span (model turns, env observations, template bridges) is appended unchanged and
the whole sequence is scored once by the *same* weights that sampled it, at the temperature it
was sampled at (`Trajectory.temperature`):

    delta_t = log p(y_t | rubric, prefix) - log p(y_t | prefix)   on mask-1 tokens, 0 elsewhere

Both sides of delta are computed in the weights' own precision (``precision="weights"``:
float32 in every mixed-precision setting, autocast off), whatever dtype sampling and updates
compute in; delta never meets a gradient, so nothing needs it in the update's dtype. The
"without rubric" side (``baseline``) is the sampler's own log-probs where it samples in float32
("rollout": cached decoding agrees with a full pass to ~1e-5; sampling in bfloat16, a float32
pass instead) or always a float32 pass of the original sequences ("rescore"). Computed in
bfloat16, the two sides would each carry bf16 noise of the size of delta itself (measured:
README, "Precision").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch

from orsd_gym.algos.grpo import sampler_logprobs
from orsd_gym.errors import ReplayError
from orsd_gym.policies.base import Completion, FinishReason, Policy
from orsd_gym.rollout.trajectory import Trajectory, sampled_temperature

Placement = Literal["system", "user", "turn"]
DeltaBaseline = Literal["rollout", "rescore"]

DEFAULT_RUBRIC_TEMPLATE = "Guidance for this task. A good attempt satisfies these criteria:\n{rubric}"


def insert_rubric(
    messages: Sequence[dict[str, str]],
    rubric: str,
    *,
    placement: Placement = "system",
    template: str = DEFAULT_RUBRIC_TEMPLATE,
) -> list[dict[str, str]]:
    """A copy of ``messages`` with the rubric block appended to the system or first user message.

    An empty rubric returns the messages unchanged. With ``placement="system"`` and no system
    message, one holding only the block is put first.
    """
    out = [dict(m) for m in messages]
    if not rubric.strip():
        return out
    if placement not in ("system", "user"):
        raise ValueError(f"rubric placement must be 'system' or 'user' here, got {placement!r}")
    try:
        block = template.format(rubric=rubric)
    except (KeyError, IndexError) as error:
        raise ValueError(f"rubric template has an unknown placeholder {error}; use {{rubric}}") from None
    index = next((i for i, m in enumerate(out) if m.get("role") == placement), None)
    if index is None:
        if placement == "user":
            raise ReplayError("the trajectory's prompt messages have no user message to put the rubric in")
        return [{"role": "system", "content": block}] + out
    content = out[index].get("content", "")
    out[index]["content"] = f"{content}\n\n{block}" if content else block
    return out


def prompt_end(trajectory: Trajectory) -> int:
    """End of the leading prompt span (``spans[0]`` must be the prompt, starting at 0)."""
    if not trajectory.spans or trajectory.spans[0].kind != "prompt" or trajectory.spans[0].start != 0:
        raise ReplayError(
            f"trajectory (group {trajectory.group_id}) does not start with a prompt span; "
            "privileged replay needs the rollout collector's span layout"
        )
    return trajectory.spans[0].end


def replay_deltas(
    policy: Policy,
    trajectories: Sequence[Trajectory],
    rubrics: Sequence[str],
    *,
    placement: Placement = "system",
    template: str = DEFAULT_RUBRIC_TEMPLATE,
    baseline: DeltaBaseline = "rollout",
    force_score: bool = False,
) -> list[torch.Tensor]:
    """delta per token of each trajectory (float32, full length, 0 on mask-0 tokens), both sides
    in the weights' precision (see the module docstring). The trajectories must have been sampled
    by ``policy`` as it is now: "rollout" reads their sampling log-probs.

    A trajectory whose privileged prompt renders to exactly its original prompt (empty rubric)
    has the same context under the same weights, so its delta is exactly 0 and it is not
    scored; ``force_score`` scores it anyway (a check that scoring reproduces the baseline).
    """
    if baseline not in ("rollout", "rescore"):
        raise ValueError(f"delta baseline must be 'rollout' or 'rescore', got {baseline!r}")
    if len(trajectories) != len(rubrics):
        raise ValueError(f"{len(trajectories)} trajectories but {len(rubrics)} rubrics")
    deltas = [torch.zeros(len(t.token_ids), dtype=torch.float32) for t in trajectories]
    sequences, masks, plan = [], [], []
    for index, (trajectory, rubric) in enumerate(zip(trajectories, rubrics, strict=True)):
        end = prompt_end(trajectory)
        if policy.chat.prompt_tokens(trajectory.prompt_messages) != trajectory.token_ids[:end]:
            raise ReplayError(
                f"trajectory (group {trajectory.group_id}): its prompt span is not the chat rendering of its "
                "prompt_messages, so the rubric cannot be inserted faithfully; was it collected with another tokenizer?"
            )
        tokens, mask, positions = _privileged(policy, trajectory, rubric, placement, template)
        if tokens == trajectory.token_ids and not force_score:
            continue
        sequences.append(tokens)
        masks.append(mask)
        plan.append((index, positions))
    if not sequences:
        return deltas
    replayed = [trajectories[index] for index, _ in plan]
    temperature = sampled_temperature(replayed)
    scored = policy.score(sequences, masks, temperature=temperature, precision="weights")
    if baseline == "rollout" and policy.dtype == torch.float32:
        without = sampler_logprobs(replayed)
    else:
        without = policy.score(
            [t.token_ids for t in replayed],
            [t.loss_mask for t in replayed],
            temperature=temperature,
            precision="weights",
        )
    for k, ((index, positions), with_rubric) in enumerate(zip(plan, scored, strict=True)):
        old_at, new_at = (
            torch.as_tensor(positions[0], dtype=torch.long),
            torch.as_tensor(positions[1], dtype=torch.long),
        )
        old = without[k].detach().float().cpu()[old_at]
        deltas[index][old_at] = with_rubric.detach().float().cpu()[new_at] - old
    return deltas


def _privileged(
    policy: Policy, trajectory: Trajectory, rubric: str, placement: Placement, template: str
) -> tuple[list[int], list[int], tuple[list[int], list[int]]]:
    """The sequence replayed with the rubric, its loss mask, and where each sampled token of the
    original sequence sits in it (original positions, privileged positions).

    "system" / "user": the rubric block joins that message of the prompt, everything after the
    prompt is unchanged. "turn": it joins the first user message and is restated in every later
    user turn (the env bridges are rebuilt from `Trajectory.observation_messages`), so it sits
    next to every model turn; only the replayed sequence changes, never what was sampled.
    """
    end = prompt_end(trajectory)
    messages = insert_rubric(
        trajectory.prompt_messages, rubric, placement="user" if placement == "turn" else placement, template=template
    )
    tokens = policy.chat.prompt_tokens(messages)
    if placement != "turn" or not rubric.strip():
        offset = len(tokens) - end
        tail = range(end, len(trajectory.token_ids))
        sampled = [t for t in tail if trajectory.loss_mask[t]]
        return (
            tokens + list(trajectory.token_ids[end:]),
            [0] * len(tokens) + list(trajectory.loss_mask[end:]),
            (sampled, [t + offset for t in sampled]),
        )
    block = template.format(rubric=rubric)
    mask = [0] * len(tokens)
    old_positions: list[int] = []
    new_positions: list[int] = []
    turn = env_turn = 0
    for span in trajectory.spans[1:]:
        if span.kind == "model":
            for t in range(span.start, span.end):
                old_positions.append(t)
                new_positions.append(len(tokens))
                tokens.append(trajectory.token_ids[t])
                mask.append(trajectory.loss_mask[t])
            previous = Completion(trajectory.token_ids[span.start : span.end], [], "", _finish(trajectory, turn))
            turn += 1
        else:
            if env_turn >= len(trajectory.observation_messages):
                raise ReplayError(
                    f"trajectory (group {trajectory.group_id}) has no observation_messages to restate the rubric "
                    "in; rubric_placement 'turn' needs sequence-layout trajectories from this version's collector"
                )
            message = f"{trajectory.observation_messages[env_turn]}\n\n{block}"
            bridge = policy.chat.bridge_tokens(message, previous)
            tokens += bridge
            mask += [0] * len(bridge)
            env_turn += 1
    return tokens, mask, (old_positions, new_positions)


def _finish(trajectory: Trajectory, turn: int) -> FinishReason:
    reasons = trajectory.extra.get("finish_reasons") or []
    return reasons[turn] if turn < len(reasons) else "length"
