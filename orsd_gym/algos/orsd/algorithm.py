"""ORSD: GRPO whose advantages are reshaped token by token by a self-written, reward-selected rubric.

Per rollout batch, for every group with mixed rewards (a group whose rewards are all equal
gets no rubric: GRPO gives it zero advantage and there is nothing to align a rubric with):

1. propose  K bundles of <= M criteria with the current policy (online), or reuse the bundles
            written once per task (offline: task description only, cached at first sight);
2. verify   every attempt against every criterion with the frozen verifier; a bundle's score
            for an attempt is the mean over its criteria;
3. select   the bundle whose scores have the highest Spearman correlation with the rewards
            (or a random one: the ablation); none unless it is above ``min_corr``;
4. replay   the sampled tokens with the selected rubric in the prompt (one scoring pass);
5. shape    A_t = A_GRPO + beta * clip(delta_t, -c, c).

Defaults for beta and c: delta_t is a per-token log-likelihood ratio, typically a few hundredths
to a few tenths of a nat, with rare tokens the rubric makes much more or less likely reaching
several nats; GRPO advantages are O(1) (std-normalised, |A| ~ 1). ``delta_clip = 1.0`` bounds a
single token's ratio at e (x2.7) so one surprising token cannot dominate, and ``beta = 0.1``
keeps the whole correction at most a tenth of a typical advantage: it redistributes credit
between tokens of a response without flipping the sign of the outcome signal.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import torch

from orsd_gym.algos.base import SOLO, Peers, PreparedBatch, register_algorithm
from orsd_gym.algos.grpo import GRPO, GRPOConfig, episode_groups
from orsd_gym.algos.orsd.alignment import credit_alignment
from orsd_gym.algos.orsd.expert_rubric import expert_bundle_for
from orsd_gym.algos.orsd.replay import DEFAULT_RUBRIC_TEMPLATE, DeltaBaseline, Placement, replay_deltas
from orsd_gym.algos.orsd.rubrics import (
    DEFAULT_OFFLINE_PROPOSAL_TEMPLATE,
    DEFAULT_PROPOSAL_SYSTEM,
    DEFAULT_PROPOSAL_TEMPLATE,
    format_rubric,
    parse_criteria,
    proposal_messages,
    render_attempt,
)
from orsd_gym.algos.orsd.selection import bundle_correlations, select_bundle, select_random_bundle
from orsd_gym.algos.orsd.shaping import group_delta_scale, shape_advantages
from orsd_gym.algos.orsd.sources import (
    APPLIED_WITHOUT_SELECTION,
    RubricSource,
    ShuffledRubrics,
    file_bundles,
    load_rubric_file,
)
from orsd_gym.algos.orsd.verifier import (
    DEFAULT_VERIFIER_SYSTEM,
    DEFAULT_VERIFIER_TEMPLATE,
    Judgement,
    Scoring,
    Verifier,
)
from orsd_gym.envs.base import EXPERT_ACTIONS
from orsd_gym.envs.presentation import WorkedExample, example_for, examples_for
from orsd_gym.policies.base import Completion, Policy, SamplingParams
from orsd_gym.profiling import phase
from orsd_gym.rollout.trajectory import Trajectory


@dataclass
class ORSDConfig(GRPOConfig):
    """GRPO's settings plus ORSD's (see the module docstring for the beta / delta_clip defaults)."""

    #: Candidate bundles per group (K) and criteria per bundle (M, at most).
    num_bundles: int = 4
    max_criteria: int = 4
    proposal_temperature: float = 1.0
    #: Enough for M=4 one-line criteria; every extra token is paid K times per group.
    proposal_max_new_tokens: int = 96
    proposal_system: str = DEFAULT_PROPOSAL_SYSTEM
    #: Placeholders: {task}, {attempts}, {num_attempts}, {max_criteria}.
    proposal_template: str = DEFAULT_PROPOSAL_TEMPLATE
    #: Task-only prompt of ``rubric_mode: offline`` (same placeholders, no attempts).
    offline_proposal_template: str = DEFAULT_OFFLINE_PROPOSAL_TEMPLATE
    #: How attempts are shown to the proposer and the verifier.
    attempt_max_obs_chars: int = 120
    attempt_max_steps: int = 16
    #: Token budget of a proposal prompt: attempts show fewer steps until it fits.
    proposal_max_context_tokens: int = 3072
    verifier_scoring: Scoring = "prob"
    verifier_system: str = DEFAULT_VERIFIER_SYSTEM
    #: Placeholders: {task}, {attempt}, {criterion}.
    verifier_template: str = DEFAULT_VERIFIER_TEMPLATE
    #: Verifier contexts per `next_token_logprobs` call.
    verifier_chunk_size: int = 64
    #: A bundle is selected only if its correlation is above this (strictly).
    min_corr: float = 0.0
    selection: Literal["reward", "random"] = "reward"
    rubric_mode: Literal["online", "offline"] = "online"
    rubric_placement: Placement = "system"
    #: Placeholder: {rubric} (the selected criteria as a bulleted list).
    rubric_template: str = DEFAULT_RUBRIC_TEMPLATE
    beta: float = 0.1
    delta_clip: float = 1.0
    center_delta: bool = False
    #: Where delta's "without rubric" log-probs come from: "rollout" (the batch's old log-probs,
    #: PPO's: no extra pass) or "rescore" (a separate scoring pass of the original sequences).
    #: Both are in the update dtype, like the "with" side; "auto" is "rollout".
    delta_baseline: DeltaBaseline | Literal["auto"] = "auto"
    #: "raw": the correction is ``beta * clip(delta)`` in nats; "normalized": each group's delta is
    #: rescaled so its mean |clip(delta)| equals the group's mean |advantage| (`group_delta_scale`),
    #: making ``beta`` the correction's share of a typical advantage. Its share of the *gradient*
    #: is larger: the delta sits on the uncertain tokens, where log-prob gradients are largest
    #: (measured at 135M: beta 0.1 gave about 2x GRPO's gradient norm, 0.5 about 9x, and the
    #: clipped steps followed the correction; keep beta <= 0.05 with "normalized").
    #: "bounded": "normalized", then each token's correction capped at ``correction_bound`` times
    #: its outcome advantage (`orsd_gym.algos.orsd.shaping`), so the correction can move credit
    #: between tokens but never outweigh or reverse the outcome: its gradient share is bounded
    #: whatever beta. Use it where the outcome signal must lead (any beta large enough to move
    #: credit at 135M let an unbounded correction swamp GRPO's gradient).
    delta_scale: Literal["raw", "normalized", "bounded"] = "raw"
    correction_bound: float = 0.5
    #: Where candidate rubrics come from (`orsd_gym.algos.orsd.sources`): the method ("policy") or
    #: a control ("expert", "shuffled") or a person's file ("file", with ``rubric_file``).
    rubric_source: RubricSource = "policy"
    rubric_file: str | None = None
    #: What a "shuffled" source lends to other tasks: expert bundles or the policy's selected ones.
    shuffled_from: Literal["expert", "policy"] = "expert"

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in (
            "num_bundles",
            "max_criteria",
            "proposal_max_new_tokens",
            "verifier_chunk_size",
            "attempt_max_steps",
            "proposal_max_context_tokens",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.proposal_temperature < 0:
            raise ValueError(f"proposal_temperature must be >= 0, got {self.proposal_temperature}")
        if self.beta < 0 or self.delta_clip <= 0:
            raise ValueError(f"need beta >= 0 and delta_clip > 0, got {self.beta}, {self.delta_clip}")
        if not 0.0 <= self.correction_bound < 1.0:
            raise ValueError(f"correction_bound is a fraction of |advantage| in [0, 1), got {self.correction_bound}")
        if not -1.0 <= self.min_corr <= 1.0:
            raise ValueError(f"min_corr is a correlation threshold in [-1, 1], got {self.min_corr}")
        if (self.rubric_source == "file") != (self.rubric_file is not None):
            raise ValueError("rubric_file is needed by rubric_source='file' and used by it only")
        if self.rubric_mode == "offline" and self.rubric_source != "policy":
            raise ValueError("rubric_mode='offline' applies to rubric_source='policy' only")

    @property
    def needs_verifier(self) -> bool:
        return True

    @property
    def needs_expert_plans(self) -> bool:
        """The rubric source reads the env's expert plan from each trajectory's reset info."""
        return self.rubric_source == "expert" or (self.rubric_source == "shuffled" and self.shuffled_from == "expert")


@dataclass
class _GroupWork:
    """What ORSD works out for one group of attempts."""

    group_id: int
    #: Every trajectory of the group (all per-step samples), and one representative per attempt.
    indices: list[int]
    attempts: list[int]
    task: str
    task_key: str
    rewards: list[float]
    bundles: list[list[str]]
    #: Where the bundles came from, and for a shuffled one the task it was written for.
    source: str = "policy"
    lent_from: str | None = None
    malformed: int = 0
    #: Raw text of the dropped bundles (shortened), to see why parsing failed.
    malformed_texts: list[str] = field(default_factory=list)
    scores: list[list[float]] | None = None
    correlations: list[float | None] | None = None
    selected: int | None = None
    reason: str = ""


@register_algorithm
class ORSD(GRPO):
    """Online Rubric Self-Distillation on top of GRPO."""

    name = "orsd"
    config_class = ORSDConfig
    config: ORSDConfig
    summed_metrics = frozenset({"num_groups", "orsd/bundles_parsed"})

    def __init__(self, config=None, *, reference: Policy | None = None, verifier: Policy | None = None) -> None:
        super().__init__(config, reference=reference, verifier=verifier)
        #: rubric_mode offline: task key -> bundles written once for that task.
        self.offline_bundles: dict[str, list[list[str]]] = {}
        #: rubric_source shuffled: rubrics of tasks seen so far, lent to other tasks.
        self.shuffled = ShuffledRubrics()
        self.rubric_table = load_rubric_file(self.config.rubric_file) if self.config.rubric_file else {}
        self._verifier: Verifier | None = None

    # ------------------------------------------------------------------ prepare

    def prepare(
        self,
        trajectories: Sequence[Trajectory],
        policy: Policy,
        *,
        iteration: int,
        rng: np.random.Generator,
        peers: Peers = SOLO,
    ) -> PreparedBatch:
        cfg = self.config
        times: dict[str, float] = {}
        with phase("orsd_total") as total:
            with phase("orsd_grpo") as timer:
                batch, groups, active = self._groups(trajectories, policy)
            times["time/orsd_grpo"] = timer.seconds
            trajs = batch.trajectories

            with phase("orsd_propose") as timer:
                self._candidates(active, trajs, policy, rng)
            times["time/orsd_propose"] = timer.seconds

            with phase("orsd_verify") as timer:
                self._verify([g for g in active if g.bundles], trajs, policy)
            times["time/orsd_verify"] = timer.seconds

            with phase("orsd_select") as timer:
                for group in active:
                    self._select(group, rng)
                if cfg.rubric_source == "shuffled":
                    self._lend(groups, active, trajs, policy, rng, peers)
            times["time/orsd_select"] = timer.seconds

            with phase("orsd_replay") as timer:
                deltas = self._replay(active, batch, policy)
            times["time/orsd_replay"] = timer.seconds

            with phase("orsd_shape") as timer:
                scales = self._delta_scales(groups, deltas, trajs, batch)
                corrections = []
                for i, trajectory in enumerate(trajs):
                    mask = torch.as_tensor(trajectory.loss_mask, dtype=torch.float32)
                    shaped = shape_advantages(
                        batch.advantages[i],
                        deltas[i],
                        mask,
                        cfg.beta,
                        cfg.delta_clip,
                        center=cfg.center_delta,
                        scale=scales.get(i, 1.0),
                        bound=cfg.correction_bound if cfg.delta_scale == "bounded" else None,
                    )
                    corrections.append(shaped - batch.advantages[i])
                    batch.advantages[i] = shaped
            times["time/orsd_shape"] = timer.seconds
        times["time/orsd_total"] = total.seconds

        batch.token_extras["orsd_delta"] = deltas
        batch.token_extras["orsd_correction"] = corrections
        batch.audit = [self._audit(g, deltas, trajs, iteration) for g in groups]
        batch.metrics.update(self._metrics(groups, active, deltas, trajs))
        if cfg.delta_scale == "bounded":
            batch.metrics["orsd/correction_capped_frac"] = _capped_frac(batch, deltas, corrections, cfg)
        batch.metrics.update(times)
        return batch

    def _groups(
        self, trajectories: Sequence[Trajectory], policy: Policy
    ) -> tuple[PreparedBatch, list[_GroupWork], list[_GroupWork]]:
        """GRPO's batch, every group's work record, and the groups with mixed rewards."""
        batch = self.grpo_prepare(trajectories, policy)
        trajs = batch.trajectories
        groups = [
            _GroupWork(
                group_id=gid,
                indices=[i for episode in episodes for i in episode],
                # An attempt is shown by its last sample (per-step samples repeat the whole episode).
                attempts=[episode[-1] for episode in episodes],
                task=trajs[episodes[0][0]].task,
                task_key=task_key(trajs[episodes[0][0]]),
                rewards=[batch.rewards[episode[0]] for episode in episodes],
                bundles=[],
                source=self.config.rubric_source,
            )
            for gid, episodes in episode_groups(trajs).items()
        ]
        active = []
        for group in groups:
            if len(group.rewards) < 2 or len(set(group.rewards)) == 1:
                group.reason = "all rewards equal"
            else:
                active.append(group)
        return batch, groups, active

    def _replay(self, active: list[_GroupWork], batch: PreparedBatch, policy: Policy) -> list[torch.Tensor]:
        """delta per token of every trajectory (zeros where its group has no selected rubric)."""
        cfg = self.config
        trajs = batch.trajectories
        rubric_of = {
            i: format_rubric(g.bundles[g.selected]) for g in active if g.selected is not None for i in g.indices
        }
        replay_indices = sorted(rubric_of)
        deltas = [torch.zeros(len(t.token_ids), dtype=torch.float32) for t in trajs]
        if replay_indices:
            replayed = replay_deltas(
                policy,
                [trajs[i] for i in replay_indices],
                [rubric_of[i] for i in replay_indices],
                temperature=cfg.temperature,
                placement=cfg.rubric_placement,
                template=cfg.rubric_template,
                baseline="rescore" if cfg.delta_baseline == "rescore" else "rollout",
                old_logprobs=[batch.old_logprobs[i] for i in replay_indices],
            )
            for i, delta in zip(replay_indices, replayed, strict=True):
                deltas[i] = delta
        return deltas

    def _verifier_for(self, policy: Policy) -> Verifier:
        if self._verifier is None:
            # No verifier given: a frozen copy of the policy as first seen, i.e. the initial weights
            # when prepare first runs before any update (the trainer passes one explicitly).
            if self.verifier is None:
                self.verifier = policy.copy_frozen()
            cfg = self.config
            self._verifier = Verifier(
                self.verifier,
                scoring=cfg.verifier_scoring,
                system=cfg.verifier_system,
                template=cfg.verifier_template,
                chunk_size=cfg.verifier_chunk_size,
            )
        return self._verifier

    def _candidates(
        self, active: list[_GroupWork], trajs: list[Trajectory], policy: Policy, rng: np.random.Generator
    ) -> None:
        """Fill ``bundles`` of the groups with mixed rewards from the configured source (a
        shuffled source of expert bundles lends them in `_lend`)."""
        source = self.config.rubric_source
        if source == "file":
            for group in active:
                group.bundles = file_bundles(self.rubric_table, group.task_key)
        elif source == "expert":
            for group in active:
                bundle = expert_bundle_for(trajs[group.attempts[0]], self.config.max_criteria)
                group.bundles = [bundle] if bundle else []
                group.reason = "" if bundle else "the expert's plan is empty"
        elif source == "policy" or self.config.shuffled_from == "policy":
            self._propose(active, trajs, policy, rng)

    def _lend(
        self,
        groups: list[_GroupWork],
        active: list[_GroupWork],
        trajs: list[Trajectory],
        policy: Policy,
        rng: np.random.Generator,
        peers: Peers,
    ) -> None:
        """Replace each mixed group's rubric with one written for another task (and verify it).

        The pool first learns the rubric of every task of the batch, the other workers' groups
        included (expert bundles: every group's, mixed or not; the policy's: each selected one),
        in group order; each group then borrows with a generator of its own, drawn from a seed
        worker 0 draws, so N workers lend exactly what one process lends."""
        if self.config.shuffled_from == "policy":
            found = [(g.task_key, g.bundles[g.selected]) for g in groups if g.selected is not None]
        else:
            plans = [(g.task_key, expert_bundle_for(trajs[g.attempts[0]], self.config.max_criteria)) for g in groups]
            found = [(key, bundle) for key, bundle in plans if bundle]
        shares = peers.all_gather((found, int(rng.integers(2**63 - 1))))
        for share, _ in shares:
            for key, bundle in share:
                self.shuffled.remember(key, bundle)
        seed = shares[0][1]
        for group in active:
            lent = self.shuffled.lend(group.task_key, np.random.default_rng([seed, group.group_id]))
            group.bundles, group.scores, group.correlations, group.selected = [], None, None, None
            if lent is None:
                group.reason = "no rubric of another task yet"
                continue
            group.lent_from, bundle = lent
            group.bundles = [bundle]
        self._verify([g for g in active if g.bundles], trajs, policy)
        for group in active:
            self._select(group, rng)

    def _propose(
        self, groups: list[_GroupWork], trajs: list[Trajectory], policy: Policy, rng: np.random.Generator
    ) -> None:
        cfg = self.config
        need: list[_GroupWork] = []
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
            contexts.extend([self._proposal_context(group, attempts, example, policy)] * cfg.num_bundles)
        params = SamplingParams(
            max_new_tokens=cfg.proposal_max_new_tokens,
            temperature=cfg.proposal_temperature,
            seed=int(rng.integers(2**31 - 1)),
        )
        with torch.no_grad():
            completions = policy.generate(contexts, params)
        for n, group in enumerate(need):
            texts = [_complete_lines(c) for c in completions[n * cfg.num_bundles : (n + 1) * cfg.num_bundles]]
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

    def _proposal_context(
        self, group: _GroupWork, attempts: list[Trajectory] | None, example: WorkedExample | None, policy: Policy
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

    def _verify(self, groups: list[_GroupWork], trajs: list[Trajectory], policy: Policy) -> None:
        if not groups:
            return
        cfg = self.config
        verifier = self._verifier_for(policy)
        judgements, where = [], []
        for n, group in enumerate(groups):
            rendered = [
                render_attempt(trajs[i], max_obs_chars=cfg.attempt_max_obs_chars, max_steps=cfg.attempt_max_steps)
                for i in group.attempts
            ]
            for k, bundle in enumerate(group.bundles):
                for criterion in bundle:
                    for g, attempt in enumerate(rendered):
                        judgements.append(Judgement(group.task, attempt, criterion))
                        where.append((n, k, g))
        values = verifier.score(judgements)
        sums = [np.zeros((len(g.bundles), len(g.attempts))) for g in groups]
        for (n, k, g), value in zip(where, values, strict=True):
            sums[n][k, g] += value
        for group, total in zip(groups, sums, strict=True):
            counts = np.array([len(b) for b in group.bundles], dtype=np.float64)[:, None]
            group.scores = (total / counts).tolist()

    def _select(self, group: _GroupWork, rng: np.random.Generator) -> None:
        cfg = self.config
        if not group.bundles:
            group.reason = group.reason if group.reason else "no well-formed bundle"
            return
        assert group.scores is not None
        group.correlations = bundle_correlations(group.scores, group.rewards)
        if cfg.rubric_source in APPLIED_WITHOUT_SELECTION and (cfg.rubric_source == "expert" or group.lent_from):
            # A control applies its one bundle whatever its alignment (recorded in the audit).
            group.selected = 0
        elif cfg.selection == "random":
            group.selected = select_random_bundle(group.scores, group.rewards, rng)
        else:
            group.selected = select_bundle(group.scores, group.rewards, cfg.min_corr)
        if group.selected is None:
            if all(c is None for c in group.correlations):
                group.reason = "no bundle's scores vary across attempts"
            else:
                group.reason = f"best correlation not above min_corr={cfg.min_corr}"

    # ------------------------------------------------------------------ records

    def _audit(self, group: _GroupWork, deltas: list[torch.Tensor], trajs: list[Trajectory], iteration: int) -> dict:
        record: dict[str, Any] = {
            "iteration": iteration,
            "group_id": group.group_id,
            "task": group.task,
            "task_key": group.task_key,
            "trajectory_indices": group.indices,
            "attempt_indices": group.attempts,
            "rewards": group.rewards,
            "rubric_mode": self.config.rubric_mode,
            "rubric_source": group.source,
            "lent_from": group.lent_from,
            "bundles": group.bundles,
            "malformed_bundles": group.malformed,
            "malformed_texts": group.malformed_texts,
            "scores": group.scores,
            "correlations": group.correlations,
            "selected": group.selected,
            "selected_rubric": group.bundles[group.selected] if group.selected is not None else None,
            "selected_correlation": (
                group.correlations[group.selected]
                if group.selected is not None and group.correlations is not None
                else None
            ),
            "no_rubric_reason": group.reason if group.selected is None else None,
        }
        if group.selected is not None:
            values = _masked_deltas(deltas, trajs, group.indices)
            record["delta"] = {
                "tokens": int(values.numel()),
                "mean": float(values.mean()) if values.numel() else 0.0,
                "abs_mean": float(values.abs().mean()) if values.numel() else 0.0,
                "min": float(values.min()) if values.numel() else 0.0,
                "max": float(values.max()) if values.numel() else 0.0,
                "clipped_frac": float((values.abs() > self.config.delta_clip).float().mean())
                if values.numel()
                else 0.0,
            }
            if _knows_expert_actions(trajs[group.indices[0]]):
                shaped = [trajs[i] for i in group.indices]
                record["credit_alignment"] = credit_alignment(shaped, [deltas[i] for i in group.indices])
        return record

    def _metrics(
        self, groups: list[_GroupWork], active: list[_GroupWork], deltas: list[torch.Tensor], trajs: list[Trajectory]
    ) -> dict[str, float]:
        selected = [g for g in groups if g.selected is not None]
        corrs = [
            g.correlations[g.selected] for g in selected if g.correlations and g.correlations[g.selected] is not None
        ]
        shaped = [i for g in selected for i in g.indices]
        values = _masked_deltas(deltas, trajs, shaped)
        proposed = sum(len(g.bundles) + g.malformed for g in active)
        alignment = {}
        if shaped and _knows_expert_actions(trajs[shaped[0]]):
            # Where delta goes, not how big it is, tells a right rubric from extra text.
            found = credit_alignment([trajs[i] for i in shaped], [deltas[i] for i in shaped])
            alignment = {
                f"orsd/credit_{name}": float(found[key])
                for name, key in (
                    ("alignment", "alignment"),
                    ("agree_mean", "agree_mean"),
                    ("other_mean", "other_mean"),
                )
                if found[key] is not None
            }
        return alignment | {
            "orsd/rubric_frac": len(selected) / len(groups),
            "orsd/mixed_group_frac": len(active) / len(groups),
            "orsd/mean_corr": float(np.mean(corrs)) if corrs else 0.0,
            "orsd/bundles_parsed": float(sum(len(g.bundles) for g in active)),
            "orsd/malformed_frac": sum(g.malformed for g in active) / proposed if proposed else 0.0,
            "orsd/abs_delta_mean": float(values.abs().mean()) if values.numel() else 0.0,
            "orsd/abs_delta_max": float(values.abs().max()) if values.numel() else 0.0,
            "orsd/delta_mean": float(values.mean()) if values.numel() else 0.0,
            "orsd/delta_clipped_frac": (
                float((values.abs() > self.config.delta_clip).float().mean()) if values.numel() else 0.0
            ),
        }

    # ------------------------------------------------------------------ checkpoints

    def state_dict(self) -> dict[str, Any]:
        return {
            "offline_bundles": {k: [list(b) for b in v] for k, v in self.offline_bundles.items()},
            "shuffled_pool": self.shuffled.state(),
        }

    def merge_worker_states(self, states: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """Every worker's offline bundles, so each knows every task any worker proposed for
        (the first worker's bundles win a task two workers proposed for in one iteration), and
        the shuffled pool every worker learnt (in rank order, so in group order)."""
        merged: dict[str, list[list[str]]] = {}
        pool = ShuffledRubrics()
        for state in states:
            for task, bundles in dict(state.get("offline_bundles", {})).items():
                merged.setdefault(task, bundles)
            for task, bundle in dict(state.get("shuffled_pool", {})).items():
                pool.remember(task, bundle)
        return {"offline_bundles": merged, "shuffled_pool": pool.state()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        unknown = set(state) - {"offline_bundles", "shuffled_pool"}
        if unknown:
            raise ValueError(f"unknown ORSD state keys {sorted(unknown)}")
        self.offline_bundles = {
            str(k): [[str(c) for c in b] for b in v] for k, v in dict(state.get("offline_bundles", {})).items()
        }
        self.shuffled = ShuffledRubrics(
            {str(k): [str(c) for c in v] for k, v in state.get("shuffled_pool", {}).items()}
        )

    def _delta_scales(
        self, groups: list[_GroupWork], deltas: list[torch.Tensor], trajs: list[Trajectory], batch: PreparedBatch
    ) -> dict[int, float]:
        """Trajectory index -> the ``normalized`` delta scale of its group (empty when ``raw``)."""
        if self.config.delta_scale == "raw":  # "bounded" caps the normalized correction
            return {}
        scales = {}
        for group in groups:
            if group.selected is None:
                continue
            clipped = _masked_deltas(deltas, trajs, group.indices).abs().clamp(max=self.config.delta_clip)
            advantages = [float(batch.token_extras["grpo_advantage"][i].abs().max()) for i in group.attempts]
            scale = group_delta_scale(advantages, clipped)
            scales.update({i: scale for i in group.indices})
        return scales


def task_key(trajectory: Trajectory) -> str:
    """The task's key as the env names it (`TextEnv.task_key`, in the reset info), the same key a
    run's task plan and a rubric file use."""
    return str(trajectory.infos[0].get("task_key") or f"{trajectory.env_id}#{trajectory.task_id}")


def _knows_expert_actions(trajectory: Trajectory) -> bool:
    """Whether the env reported its expert's next action at each step (``expert=True``)."""
    return len(trajectory.infos) > 1 and EXPERT_ACTIONS in trajectory.infos[1]


def _complete_lines(completion: Completion) -> str:
    """The text of a proposal without a last line the token limit cut mid-criterion."""
    if completion.finish_reason == "length" and "\n" in completion.text:
        return completion.text.rsplit("\n", 1)[0]
    return completion.text


def _capped_frac(
    batch: PreparedBatch, deltas: list[torch.Tensor], corrections: list[torch.Tensor], cfg: ORSDConfig
) -> float:
    """Share of the corrected tokens (non-zero delta) whose correction the bound capped."""
    capped = total = 0
    for i, correction in enumerate(corrections):
        outcome = batch.token_extras["grpo_advantage"][i]
        touched = deltas[i] != 0
        capped += int((touched & (correction.abs() >= cfg.correction_bound * outcome.abs() - 1e-12)).sum())
        total += int(touched.sum())
    return capped / total if total else 0.0


def _masked_deltas(deltas: list[torch.Tensor], trajs: list[Trajectory], indices: Sequence[int]) -> torch.Tensor:
    parts = [deltas[i][torch.as_tensor(trajs[i].loss_mask, dtype=torch.bool)] for i in indices]
    return torch.cat(parts) if parts else torch.zeros(0)
