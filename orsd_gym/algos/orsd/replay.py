"""Privileged replay: re-score the sampled tokens with the rubric in the context.

The trajectory's prompt span is re-rendered from `Trajectory.prompt_messages` with the rubric
inserted (into the system message or the first user message, by a template); everything after
the prompt span (model turns, env observations, template bridges) is appended unchanged and
the whole sequence is scored once by the *same* weights that sampled it, at the sampling
temperature:

    delta_t = log p(y_t | rubric, prefix) - log p(y_t | prefix)   on mask-1 tokens, 0 elsewhere

The "without rubric" side (``baseline``) is either the rollout-time log-probs stored in the
Trajectory ("rollout": one scoring pass) or a second scoring pass of the original sequence
("rescore"). In float32 the two agree to ~1e-4; in bf16/fp16, cached incremental decoding and
one full forward differ by ~1e-3 to 1e-2 per token, the size of a typical delta, so the two
sides of the difference must come from the same kind of pass.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch

from orsd_gym.errors import ReplayError
from orsd_gym.policies.base import Policy
from orsd_gym.rollout.trajectory import Trajectory

Placement = Literal["system", "user"]
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
        raise ValueError(f"rubric placement must be 'system' or 'user', got {placement!r}")
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
    temperature: float = 1.0,
    placement: Placement = "system",
    template: str = DEFAULT_RUBRIC_TEMPLATE,
    baseline: DeltaBaseline = "rollout",
    force_score: bool = False,
) -> list[torch.Tensor]:
    """delta per token of each trajectory (float32, full length, 0 on mask-0 tokens).

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
        original = trajectory.token_ids[:end]
        if policy.chat.prompt_tokens(trajectory.prompt_messages) != original:
            raise ReplayError(
                f"trajectory (group {trajectory.group_id}): its prompt span is not the chat rendering of its "
                "prompt_messages, so the rubric cannot be inserted faithfully; was it collected with another tokenizer?"
            )
        messages = insert_rubric(trajectory.prompt_messages, rubric, placement=placement, template=template)
        new_prompt = policy.chat.prompt_tokens(messages)
        if new_prompt == original and not force_score:
            continue
        sequences.append(new_prompt + list(trajectory.token_ids[end:]))
        masks.append([0] * len(new_prompt) + list(trajectory.loss_mask[end:]))
        plan.append((index, end, len(new_prompt)))
    if not sequences:
        return deltas
    with torch.no_grad():
        scored = policy.score(sequences, masks, temperature=temperature)
        if baseline == "rescore":
            originals = [trajectories[index] for index, _, _ in plan]
            rescored = policy.score(
                [t.token_ids for t in originals], [t.loss_mask for t in originals], temperature=temperature
            )
    for k, ((index, end, new_end), with_rubric) in enumerate(zip(plan, scored, strict=True)):
        trajectory = trajectories[index]
        mask = torch.as_tensor(trajectory.loss_mask[end:], dtype=torch.float32)
        if baseline == "rescore":
            old = rescored[k][end:].detach().float().cpu()
        else:
            old = torch.as_tensor(trajectory.logprobs[end:], dtype=torch.float32)
        new = with_rubric[new_end:].detach().float().cpu()
        deltas[index][end:] = (new - old) * mask
    return deltas
