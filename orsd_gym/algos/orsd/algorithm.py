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
from typing import Any, get_args

import numpy as np
import torch

from orsd_gym import progress
from orsd_gym.algos.base import SOLO, Peers, PreparedBatch, register_algorithm
from orsd_gym.algos.grpo import GRPO, episode_groups
from orsd_gym.algos.orsd.config import ORSDConfig, RubricSource
from orsd_gym.algos.orsd.groups import BatchView, Group, Judged, masked_deltas, task_key
from orsd_gym.algos.orsd.judge import Judge
from orsd_gym.algos.orsd.proposer import Proposer
from orsd_gym.algos.orsd.records import audit_record, batch_metrics, capped_frac
from orsd_gym.algos.orsd.replay import replay_deltas
from orsd_gym.algos.orsd.rubrics import format_rubric
from orsd_gym.algos.orsd.shaping import centre_delta, group_delta_scale, shape_advantages
from orsd_gym.algos.orsd.signal import RUN_SUMMARIES, orsd_signal_lines
from orsd_gym.algos.orsd.sources import Lending, ShuffledRubrics, make_source
from orsd_gym.algos.orsd.verifier import Verifier
from orsd_gym.policies.base import Policy
from orsd_gym.profiling import phase
from orsd_gym.rollout.trajectory import Trajectory


@register_algorithm
class ORSD(GRPO):
    """Online Rubric Self-Distillation on top of GRPO (the five steps: see the module docstring)."""

    name = "orsd"
    config_class = ORSDConfig
    config: ORSDConfig
    summed_metrics = frozenset({"num_groups", "orsd/bundles_parsed"})
    #: An arm per rubric source: ``orsd:expert`` and ``orsd:shuffled`` are the controls.
    variants = {source: {"rubric_source": source} for source in get_args(RubricSource)}
    run_summaries = RUN_SUMMARIES

    @classmethod
    def signal_lines(cls, summary: Mapping[str, Any]) -> list[str]:
        return orsd_signal_lines(summary)

    def __init__(self, config=None, *, reference: Policy | None = None, verifier: Policy | None = None) -> None:
        super().__init__(config, reference=reference, verifier=verifier)
        cfg = self.config
        self.proposer = Proposer(cfg)
        #: rubric_source shuffled: rubrics of tasks seen so far, lent to other tasks.
        self.lending = Lending(cfg.shuffled_from == "policy", cfg.max_criteria)
        self.source = make_source(cfg, self.proposer, self.lending)
        self.judge = Judge(cfg, self._verifier_for)
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

        # Before any other draw: what the source draws must not depend on what the steps draw.
        seed = self.source.draw(rng)
        with timed("total"):
            with timed("grpo"):
                batch, groups = self._groups(trajectories, policy)
            trajs = batch.trajectories
            view = BatchView(trajs, groups, policy, peers, seed)
            active = [group for group in groups if group.mixed]
            with timed("propose"):
                candidates = self.source.propose(active, view, rng)
            with timed("verify"):
                scores = self.judge.verify(active, candidates, view)
            with timed("select"):
                settled = self.source.settle(self.judge, active, candidates, scores, view, rng)
            # Every group, in order: a group whose rewards are all equal gets no rubric.
            by_id = {j.group.group_id: j for j in settled}
            judged = [by_id.get(group.group_id) or Judged.without_signal(group) for group in groups]
            with timed("replay"):
                deltas = self._replay(judged, batch, policy)
            with timed("shape"):
                corrections = self._shape(judged, deltas, batch)

        batch.token_extras["orsd_delta"] = deltas
        batch.token_extras["orsd_correction"] = corrections
        batch.audit = [audit_record(j, deltas, trajs, iteration, cfg) for j in judged]
        batch.metrics.update(batch_metrics(judged, deltas, trajs, cfg))
        if cfg.delta_scale == "bounded":
            batch.metrics["orsd/correction_capped_frac"] = capped_frac(batch, deltas, corrections, cfg)
        batch.metrics.update(times)
        return batch

    def _groups(self, trajectories: Sequence[Trajectory], policy: Policy) -> tuple[PreparedBatch, list[Group]]:
        """GRPO's batch and its groups of attempts."""
        batch = self.grpo_prepare(trajectories, policy)
        trajs = batch.trajectories
        groups = [
            Group(
                group_id=gid,
                indices=[i for episode in episodes for i in episode],
                # An attempt is shown by its last sample (per-step samples repeat the whole episode).
                attempts=[episode[-1] for episode in episodes],
                task=trajs[episodes[0][0]].task,
                task_key=task_key(trajs[episodes[0][0]]),
                rewards=[batch.rewards[episode[0]] for episode in episodes],
            )
            for gid, episodes in episode_groups(trajs).items()
        ]
        return batch, groups

    def _replay(self, judged: list[Judged], batch: PreparedBatch, policy: Policy) -> list[torch.Tensor]:
        """delta per token of every trajectory (zeros where its group has no selected rubric)."""
        cfg = self.config
        trajs = batch.trajectories
        rubric_of = {i: format_rubric(j.rubric) for j in judged if j.rubric is not None for i in j.group.indices}
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

    def _shape(self, judged: list[Judged], deltas: list[torch.Tensor], batch: PreparedBatch) -> list[torch.Tensor]:
        """Add each token's correction to the batch's advantages; returns the corrections.
        With ``center_delta`` each delta is centred first, and the group's scale is measured on
        what is applied."""
        cfg = self.config
        masks = [torch.as_tensor(t.loss_mask, dtype=torch.float32) for t in batch.trajectories]
        if cfg.center_delta:
            deltas = [centre_delta(d, m) for d, m in zip(deltas, masks, strict=True)]
        scales = self._delta_scales(judged, deltas, batch.trajectories, batch)
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
        self, judged: list[Judged], deltas: list[torch.Tensor], trajs: list[Trajectory], batch: PreparedBatch
    ) -> dict[int, float]:
        """Trajectory index -> the ``normalized`` delta scale of its group (empty when ``raw``)."""
        if self.config.delta_scale == "raw":  # "bounded" caps the normalized correction
            return {}
        scales = {}
        for group in (j.group for j in judged if j.rubric is not None):
            clipped = masked_deltas(deltas, trajs, group.indices).abs().clamp(max=self.config.delta_clip)
            advantages = [float(batch.outcome_advantages[i].abs().max()) for i in group.attempts]
            scale = group_delta_scale(advantages, clipped)
            scales.update({i: scale for i in group.indices})
        return scales


@contextlib.contextmanager
def _timed(times: dict[str, float], name: str) -> Iterator[None]:
    """Profile the block as phase ``orsd_<name>``; its seconds land in ``times["time/orsd_<name>"]``.
    The command's progress lines name it (proposals or verification can take minutes on a CPU)."""
    progress.note(f"ORSD: {name}")
    with phase(f"orsd_{name}") as timer:
        yield
    times[f"time/orsd_{name}"] = timer.seconds
