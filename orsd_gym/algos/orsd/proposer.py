"""The method's rubric writer: the current policy writes candidate bundles of process criteria.

When it writes them is the ``rubric_mode``, a strategy of its own (`Online`, `Offline`): online,
from each group's attempts (rendered without their outcome, `rubrics.render_attempt`); offline,
once per task from the task alone, kept for the task's later groups. The env's worked example
(`orsd_gym.envs.presentation`) precedes the request, and criteria copying it are dropped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch

from orsd_gym.algos.orsd.groups import BatchView, Candidates, Group
from orsd_gym.algos.orsd.rubrics import parse_criteria, proposal_messages
from orsd_gym.envs.presentation import WorkedExample, example_for, examples_for
from orsd_gym.policies.base import Completion, Policy, SamplingParams
from orsd_gym.rollout.trajectory import Trajectory

if TYPE_CHECKING:
    from orsd_gym.algos.orsd.config import ORSDConfig

#: rubric_mode offline: task key -> the bundles written once for that task.
OfflineBundles = dict[str, list[list[str]]]


class Online:
    """``rubric_mode: online``: every group's bundles are written from its own attempts."""

    def pending(self, groups: Sequence[Group], kept: OfflineBundles) -> list[Group]:
        """The groups the policy writes for now."""
        return list(groups)

    def shown(self, group: Group, trajs: Sequence[Trajectory]) -> list[Trajectory] | None:
        """The attempts a proposal shows (None: the task alone)."""
        return [trajs[i] for i in group.attempts]

    def settle(
        self, groups: Sequence[Group], written: Mapping[int, Candidates], kept: OfflineBundles
    ) -> list[Candidates]:
        """Each group's candidates from what was ``written`` (by group id) now, and ``kept``."""
        return [written[group.group_id] for group in groups]


class Offline:
    """``rubric_mode: offline``: one proposal per task, from the task description alone, kept
    (in ``kept``, the checkpointed `Proposer.offline_bundles`) for the task's later groups."""

    def pending(self, groups: Sequence[Group], kept: OfflineBundles) -> list[Group]:
        # One proposal per distinct task not written for yet.
        return list({g.task_key: g for g in groups if g.task_key not in kept}.values())

    def shown(self, group: Group, trajs: Sequence[Trajectory]) -> list[Trajectory] | None:
        return None

    def settle(
        self, groups: Sequence[Group], written: Mapping[int, Candidates], kept: OfflineBundles
    ) -> list[Candidates]:
        task_key = {g.group_id: g.task_key for g in groups}
        for group_id, found in written.items():
            if found.bundles:
                # Only usable bundles are kept: a task whose proposals all failed to parse is
                # proposed for again the next time it comes up.
                kept[task_key[group_id]] = [list(b) for b in found.bundles]
        return [
            written[g.group_id] if g.group_id in written else Candidates([list(b) for b in kept.get(g.task_key, [])])
            for g in groups
        ]


MODES = {"online": Online, "offline": Offline}


class Proposer:
    """Writes ``num_bundles`` candidate bundles per group with the policy."""

    def __init__(self, config: ORSDConfig) -> None:
        self.config = config
        self.mode = MODES[config.rubric_mode]()
        self.offline_bundles: OfflineBundles = {}

    def propose(self, groups: Sequence[Group], view: BatchView, rng: np.random.Generator) -> list[Candidates]:
        """Each group's candidates, in order (written now, or kept from an earlier batch)."""
        pending = self.mode.pending(groups, self.offline_bundles)
        written = self.write(pending, view, rng)
        return self.mode.settle(groups, written, self.offline_bundles)

    def write(self, groups: Sequence[Group], view: BatchView, rng: np.random.Generator) -> dict[int, Candidates]:
        """Group id -> what the policy wrote for it (``num_bundles`` proposals, parsed)."""
        if not groups:
            return {}
        cfg = self.config
        trajs = view.trajectories
        contexts = []
        for group in groups:
            attempts = self.mode.shown(group, trajs)
            env_id = trajs[group.attempts[0]].env_id
            example = example_for(env_id, group.task, attempts[0].infos[0] if attempts and attempts[0].infos else {})
            contexts.extend([self.context(group, attempts, example, view.policy)] * cfg.num_bundles)
        params = SamplingParams(max_new_tokens=cfg.proposal_max_new_tokens, temperature=cfg.proposal_temperature)
        # A generator per proposal: the same proposals whether a memory budget splits the call or not.
        seeds = [int(seed) for seed in rng.integers(2**31 - 1, size=len(contexts))]
        with torch.no_grad():
            completions = view.policy.generate(contexts, params, seeds=seeds)
        written = {}
        for n, group in enumerate(groups):
            texts = [complete_lines(c) for c in completions[n * cfg.num_bundles : (n + 1) * cfg.num_bundles]]
            copies = [example.thing for example in examples_for(trajs[group.attempts[0]].env_id) if example.thing]
            parsed = [parse_criteria(text, cfg.max_criteria, copies=copies) for text in texts]
            written[group.group_id] = Candidates(
                bundles=[p for p in parsed if p],
                malformed=sum(1 for p in parsed if not p),
                malformed_texts=[text[:300] for text, p in zip(texts, parsed, strict=True) if not p],
            )
        return written

    def context(
        self, group: Group, attempts: list[Trajectory] | None, example: WorkedExample | None, policy: Policy
    ) -> list[int]:
        """The rendered proposal prompt, showing fewer steps per attempt until it fits the budget."""
        cfg = self.config
        max_steps = cfg.attempt_max_steps
        while True:
            messages = proposal_messages(
                group.task,
                attempts,
                max_criteria=cfg.max_criteria,
                system=cfg.proposal_system,
                template=cfg.offline_proposal_template if attempts is None else cfg.proposal_template,
                max_obs_chars=cfg.attempt_max_obs_chars,
                max_steps=max_steps,
                example=example,
            )
            # A proposal is read as a list of criteria; with thinking on its token budget would go to reasoning.
            context = policy.chat.prompt_tokens(messages, thinking=False)
            if len(context) <= cfg.proposal_max_context_tokens or max_steps == 1:
                return context
            max_steps = max(1, max_steps // 2)


def complete_lines(completion: Completion) -> str:
    """The text of a proposal without a last line the token limit cut mid-criterion."""
    if completion.finish_reason == "length" and "\n" in completion.text:
        return completion.text.rsplit("\n", 1)[0]
    return completion.text
