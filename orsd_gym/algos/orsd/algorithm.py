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

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

import numpy as np
import torch

from orsd_gym import progress
from orsd_gym.algos.base import SOLO, Peers, PreparedBatch, register_algorithm
from orsd_gym.algos.grpo import GRPO, GRPOConfig, episode_groups
from orsd_gym.algos.orsd.groups import GroupWork, masked_deltas, task_key
from orsd_gym.algos.orsd.judge import select, verify
from orsd_gym.algos.orsd.proposer import Proposer
from orsd_gym.algos.orsd.records import audit_record, batch_metrics, capped_frac
from orsd_gym.algos.orsd.replay import DEFAULT_RUBRIC_TEMPLATE, DeltaBaseline, Placement, replay_deltas
from orsd_gym.algos.orsd.rubrics import (
    DEFAULT_OFFLINE_PROPOSAL_TEMPLATE,
    DEFAULT_PROPOSAL_SYSTEM,
    DEFAULT_PROPOSAL_TEMPLATE,
    format_rubric,
)
from orsd_gym.algos.orsd.shaping import centre_delta, group_delta_scale, shape_advantages
from orsd_gym.algos.orsd.sources import (
    ExpertRubrics,
    FileRubrics,
    Lending,
    NoRubrics,
    PolicyRubrics,
    RubricSource,
    ShuffledRubrics,
    load_rubric_file,
)
from orsd_gym.algos.orsd.verifier import (
    DEFAULT_VERIFIER_SYSTEM,
    DEFAULT_VERIFIER_TEMPLATE,
    Scoring,
    Verifier,
)
from orsd_gym.policies.base import Policy
from orsd_gym.profiling import phase
from orsd_gym.rollout.trajectory import Trajectory


@dataclass
class ORSDConfig(GRPOConfig):
    """GRPO's settings plus ORSD's (see the module docstring for the beta / delta_clip defaults)."""

    #: Candidate bundles per group (K) and criteria per bundle (M, at most).
    num_bundles: int = 4
    #: Criteria per candidate bundle, at most (M).
    max_criteria: int = 4
    #: Sampling temperature of the rubric proposals (0: greedy, all K alike).
    proposal_temperature: float = 1.0
    #: Enough for M=4 one-line criteria; every extra token is paid K times per group.
    proposal_max_new_tokens: int = 96
    #: System prompt of the rubric writer.
    proposal_system: str = DEFAULT_PROPOSAL_SYSTEM
    #: Placeholders: {task}, {attempts}, {num_attempts}, {max_criteria}.
    proposal_template: str = DEFAULT_PROPOSAL_TEMPLATE
    #: Task-only prompt of ``rubric_mode: offline`` (same placeholders, no attempts).
    offline_proposal_template: str = DEFAULT_OFFLINE_PROPOSAL_TEMPLATE
    #: How attempts are shown to the proposer and the verifier.
    attempt_max_obs_chars: int = 120
    #: Steps of each attempt shown, at most (fewer when the prompt would not fit).
    attempt_max_steps: int = 16
    #: Token budget of a proposal prompt: attempts show fewer steps until it fits.
    proposal_max_context_tokens: int = 3072
    #: How the verifier scores a criterion: "prob" (P(yes) renormalised over yes and no) or
    #: "binary" (1 when yes is the likelier answer, else 0).
    verifier_scoring: Scoring = "prob"
    #: System prompt of the verifier.
    verifier_system: str = DEFAULT_VERIFIER_SYSTEM
    #: Placeholders: {task}, {attempt}, {criterion}.
    verifier_template: str = DEFAULT_VERIFIER_TEMPLATE
    #: Verifier contexts per `next_token_logprobs` call.
    verifier_chunk_size: int = 64
    #: A bundle is selected only if its correlation is above this (strictly).
    min_corr: float = 0.0
    #: "reward": the bundle whose scores correlate best with the rewards; "random": any bundle (a control).
    selection: Literal["reward", "random"] = "reward"
    #: "online": rubrics written from each group's attempts; "offline": written once per task from the task
    #: alone.
    rubric_mode: Literal["online", "offline"] = "online"
    #: Where the replay puts the selected rubric: the system prompt, the first user message, or restated before
    #: every turn ("turn").
    rubric_placement: Placement = "system"
    #: Placeholder: {rubric} (the selected criteria as a bulleted list).
    rubric_template: str = DEFAULT_RUBRIC_TEMPLATE
    #: Weight of the correction delta added to the GRPO advantage (its meaning depends on `delta_scale`).
    beta: float = 0.1
    #: Each token's delta is clipped to [-delta_clip, delta_clip] nats before it is scaled.
    delta_clip: float = 1.0
    #: Subtract each trajectory's mean delta (removes a rubric's uniform shift of every token;
    #: the ``normalized`` scale is then measured on the centred delta).
    center_delta: bool = False
    #: Where delta's "without rubric" log-probs come from: "rollout" (the sampler's own where it
    #: samples in float32: no extra pass; else a float32 pass) or "rescore" (always a float32
    #: pass of the original sequences). Both sides of delta are computed in the weights' own
    #: precision (float32 in the mixed-precision presets), whatever `update_dtype` is; "auto" is "rollout".
    delta_baseline: DeltaBaseline | Literal["auto"] = "auto"
    #: "raw": the correction is ``beta * clip(delta)`` in nats; "normalized": each group's delta is
    #: rescaled so its mean |clip(delta)| equals the group's mean |advantage| (`group_delta_scale`),
    #: making ``beta`` the correction's share of a typical advantage. Its share of the *gradient*
    #: is larger: the delta sits on the uncertain tokens, where log-prob gradients are largest
    #: (benchmarks/README.md, the beta study: keep beta small with "normalized").
    #: "bounded": "normalized", then each token's correction capped at ``correction_bound`` times
    #: its outcome advantage (`orsd_gym.algos.orsd.shaping`), so on every token the correction can
    #: move credit but never outweigh or reverse the outcome's push. That bounds it per token, not
    #: its share of the gradient: where attempts share tokens the outcome's terms cancel and the
    #: correction's can add up.
    delta_scale: Literal["raw", "normalized", "bounded"] = "raw"
    #: With delta_scale "bounded": each token's correction is at most this fraction of its |advantage|, in [0,
    #: 1).
    correction_bound: float = 0.5
    #: Where candidate rubrics come from (`orsd_gym.algos.orsd.sources`): the method ("policy") or
    #: a control ("expert", "shuffled") or a person's file ("file", with ``rubric_file``).
    rubric_source: RubricSource = "policy"
    #: With rubric_source "file": YAML mapping task keys (or "*") to lists of criteria.
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


@register_algorithm
class ORSD(GRPO):
    """Online Rubric Self-Distillation on top of GRPO (the five steps: see the module docstring)."""

    name = "orsd"
    config_class = ORSDConfig
    config: ORSDConfig
    summed_metrics = frozenset({"num_groups", "orsd/bundles_parsed"})
    #: An arm per rubric source: ``orsd:expert`` and ``orsd:shuffled`` are the controls.
    variants = {source: {"rubric_source": source} for source in get_args(RubricSource)}

    def __init__(self, config=None, *, reference: Policy | None = None, verifier: Policy | None = None) -> None:
        super().__init__(config, reference=reference, verifier=verifier)
        cfg = self.config
        self.proposer = Proposer(cfg)
        self.source = _source(cfg, self.proposer)
        #: rubric_source shuffled: rubrics of tasks seen so far, lent to other tasks.
        self.lending = Lending(cfg.shuffled_from == "policy", cfg.max_criteria)
        self._verifier: Verifier | None = None

    @property
    def offline_bundles(self) -> dict[str, list[list[str]]]:
        """rubric_mode offline: task key -> bundles written once for that task."""
        return self.proposer.offline_bundles

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

        def timed(name: str):
            return _timed(times, name)

        # Drawn before anything consumes rng: worker 0 then draws what a single process draws,
        # whatever its share of the batch's mixed groups (every worker lends with worker 0's).
        lending_seed = int(rng.integers(2**63 - 1)) if cfg.rubric_source == "shuffled" else 0
        with timed("total"):
            with timed("grpo"):
                batch, groups, active = self._groups(trajectories, policy)
            trajs = batch.trajectories
            with timed("propose"):
                self.source.fill(active, trajs, policy, rng)
            with timed("verify"):
                verify(self._verifier_for(policy), [g for g in active if g.bundles], trajs, cfg)
            with timed("select"):
                for group in active:
                    select(group, cfg, rng)
                if cfg.rubric_source == "shuffled":
                    self.lending.lend(groups, active, trajs, lending_seed, peers)
                    verify(self._verifier_for(policy), [g for g in active if g.bundles], trajs, cfg)
                    for group in active:
                        select(group, cfg, rng)
            with timed("replay"):
                deltas = self._replay(active, batch, policy)
            with timed("shape"):
                corrections = self._shape(groups, deltas, batch)

        batch.token_extras["orsd_delta"] = deltas
        batch.token_extras["orsd_correction"] = corrections
        batch.audit = [audit_record(g, deltas, trajs, iteration, cfg) for g in groups]
        batch.metrics.update(batch_metrics(groups, active, deltas, trajs, cfg))
        if cfg.delta_scale == "bounded":
            batch.metrics["orsd/correction_capped_frac"] = capped_frac(batch, deltas, corrections, cfg)
        batch.metrics.update(times)
        return batch

    def _groups(
        self, trajectories: Sequence[Trajectory], policy: Policy
    ) -> tuple[PreparedBatch, list[GroupWork], list[GroupWork]]:
        """GRPO's batch, every group's work record, and the groups with mixed rewards."""
        batch = self.grpo_prepare(trajectories, policy)
        trajs = batch.trajectories
        groups = [
            GroupWork(
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

    def _replay(self, active: list[GroupWork], batch: PreparedBatch, policy: Policy) -> list[torch.Tensor]:
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
                placement=cfg.rubric_placement,
                template=cfg.rubric_template,
                baseline="rescore" if cfg.delta_baseline == "rescore" else "rollout",
            )
            for i, delta in zip(replay_indices, replayed, strict=True):
                deltas[i] = delta
        return deltas

    def _shape(self, groups: list[GroupWork], deltas: list[torch.Tensor], batch: PreparedBatch) -> list[torch.Tensor]:
        """Add each token's correction to the batch's advantages; returns the corrections.
        With ``center_delta`` each delta is centred first, and the group's scale is measured on
        what is applied."""
        cfg = self.config
        masks = [torch.as_tensor(t.loss_mask, dtype=torch.float32) for t in batch.trajectories]
        if cfg.center_delta:
            deltas = [centre_delta(d, m) for d, m in zip(deltas, masks, strict=True)]
        scales = self._delta_scales(groups, deltas, batch.trajectories, batch)
        corrections = []
        for i, mask in enumerate(masks):
            shaped = shape_advantages(
                batch.advantages[i],
                deltas[i],
                mask,
                cfg.beta,
                cfg.delta_clip,
                scale=scales.get(i, 1.0),
                bound=cfg.correction_bound if cfg.delta_scale == "bounded" else None,
            )
            corrections.append(shaped - batch.advantages[i])
            batch.advantages[i] = shaped
        return corrections

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

    # ------------------------------------------------------------------ checkpoints

    def state_dict(self) -> dict[str, Any]:
        return {
            "offline_bundles": {k: [list(b) for b in v] for k, v in self.proposer.offline_bundles.items()},
            "shuffled_pool": self.lending.pool.state(),
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
        self.proposer.offline_bundles = {
            str(k): [[str(c) for c in b] for b in v] for k, v in dict(state.get("offline_bundles", {})).items()
        }
        self.lending.pool = ShuffledRubrics(
            {str(k): [str(c) for c in v] for k, v in state.get("shuffled_pool", {}).items()}
        )

    def _delta_scales(
        self, groups: list[GroupWork], deltas: list[torch.Tensor], trajs: list[Trajectory], batch: PreparedBatch
    ) -> dict[int, float]:
        """Trajectory index -> the ``normalized`` delta scale of its group (empty when ``raw``)."""
        if self.config.delta_scale == "raw":  # "bounded" caps the normalized correction
            return {}
        scales = {}
        for group in groups:
            if group.selected is None:
                continue
            clipped = masked_deltas(deltas, trajs, group.indices).abs().clamp(max=self.config.delta_clip)
            advantages = [float(batch.outcome_advantages[i].abs().max()) for i in group.attempts]
            scale = group_delta_scale(advantages, clipped)
            scales.update({i: scale for i in group.indices})
        return scales


def _source(config: ORSDConfig, proposer: Proposer) -> Any:
    """Where a group's candidate bundles come from (`orsd_gym.algos.orsd.sources`)."""
    if config.rubric_source == "file":
        return FileRubrics(load_rubric_file(config.rubric_file) if config.rubric_file else {})
    if config.rubric_source == "expert":
        return ExpertRubrics(config.max_criteria)
    if config.rubric_source == "policy" or config.shuffled_from == "policy":
        return PolicyRubrics(proposer)
    return NoRubrics()


@contextlib.contextmanager
def _timed(times: dict[str, float], name: str) -> Iterator[None]:
    """Profile the block as phase ``orsd_<name>``; its seconds land in ``times["time/orsd_<name>"]``.
    The command's progress lines name it (proposals or verification can take minutes on a CPU)."""
    progress.note(f"ORSD: {name}")
    with phase(f"orsd_{name}") as timer:
        yield
    times[f"time/orsd_{name}"] = timer.seconds
