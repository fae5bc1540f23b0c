"""The method's rubric writer: the current policy writes candidate bundles of process criteria.

Online, from each group's attempts (rendered without their outcome, `rubrics.render_attempt`);
offline (``rubric_mode: offline``), once per task from the task alone, kept for the task's
later groups. The env's worked example (`orsd_gym.envs.presentation`) precedes the request,
and criteria copying it are dropped.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from orsd_gym.algos.orsd.groups import GroupWork
from orsd_gym.algos.orsd.rubrics import parse_criteria, proposal_messages
from orsd_gym.envs.presentation import WorkedExample, example_for, examples_for
from orsd_gym.policies.base import Completion, Policy, SamplingParams
from orsd_gym.rollout.trajectory import Trajectory

if TYPE_CHECKING:
    from orsd_gym.algos.orsd.config import ORSDConfig


class Proposer:
    """Writes ``num_bundles`` candidate bundles per group with the policy."""

    def __init__(self, config: ORSDConfig) -> None:
        self.config = config
        #: rubric_mode offline: task key -> bundles written once for that task.
        self.offline_bundles: dict[str, list[list[str]]] = {}

    def propose(
        self, groups: list[GroupWork], trajs: list[Trajectory], policy: Policy, rng: np.random.Generator
    ) -> None:
        cfg = self.config
        need: list[GroupWork] = []
        for group in groups:
            if cfg.rubric_mode == "offline" and group.task_key in self.offline_bundles:
                group.bundles = [list(b) for b in self.offline_bundles[group.task_key]]
            else:
                need.append(group)
        if cfg.rubric_mode == "offline":
            # One proposal per distinct task, written from the task description alone.
            need = list({g.task_key: g for g in need}.values())
        if not need:
            return
        contexts = []
        for group in need:
            attempts = None if cfg.rubric_mode == "offline" else [trajs[i] for i in group.attempts]
            env_id = trajs[group.attempts[0]].env_id
            example = example_for(env_id, group.task, attempts[0].infos[0] if attempts and attempts[0].infos else {})
            contexts.extend([self.context(group, attempts, example, policy)] * cfg.num_bundles)
        params = SamplingParams(max_new_tokens=cfg.proposal_max_new_tokens, temperature=cfg.proposal_temperature)
        # A generator per proposal: the same proposals whether a memory budget splits the call or not.
        seeds = [int(seed) for seed in rng.integers(2**31 - 1, size=len(contexts))]
        with torch.no_grad():
            completions = policy.generate(contexts, params, seeds=seeds)
        for n, group in enumerate(need):
            texts = [complete_lines(c) for c in completions[n * cfg.num_bundles : (n + 1) * cfg.num_bundles]]
            env_id = trajs[group.attempts[0]].env_id
            copies = [example.thing for example in examples_for(env_id) if example.thing]
            parsed = [parse_criteria(text, cfg.max_criteria, copies=copies) for text in texts]
            group.bundles = [p for p in parsed if p]
            group.malformed = sum(1 for p in parsed if not p)
            group.malformed_texts = [text[:300] for text, p in zip(texts, parsed, strict=True) if not p]
            if cfg.rubric_mode == "offline" and group.bundles:
                # Only usable bundles are kept: a task whose proposals all failed to parse is
                # proposed for again the next time it comes up.
                self.offline_bundles[group.task_key] = [list(b) for b in group.bundles]
        if cfg.rubric_mode == "offline":
            for group in groups:
                if not group.bundles:
                    group.bundles = [list(b) for b in self.offline_bundles.get(group.task_key, [])]

    def context(
        self, group: GroupWork, attempts: list[Trajectory] | None, example: WorkedExample | None, policy: Policy
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
