"""GRPO: group-relative outcome advantages and the PPO clipped surrogate.

Every equation is a small function so it can be read (and tested) on its own:

    A_i        = (R_i - mean_g R) / (std_g R + eps)          (norm_std=False: centring only)
    A_{i,t}    = A_i on every mask-1 token of trajectory i, 0 elsewhere
    r_{i,t}    = exp(log pi(y_t) - log pi_old(y_t))          (pi_old: the sampling weights, scored as the update scores)
    L^pg_{i,t} = -min(r A, clip(r, 1 - clip_low, 1 + clip_high) A)
    L^kl_{i,t} = exp(q - p) - (q - p) - 1,  p = log pi, q = log pi_ref     (k3, unbiased, >= 0)
    L_{i,t}    = L^pg + kl_coef L^kl - entropy_coef H_t
    token-mean:           sum_{i,t} m L / sum_{i,t} m       over the mini-batch
    seq-mean-token-mean:  mean_i (sum_t m L / sum_t m)      over the mini-batch
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import torch

from orsd_gym.algos.base import SOLO, Algorithm, Peers, PreparedBatch, register_algorithm
from orsd_gym.algos.rewards import RewardConfig, trajectory_reward
from orsd_gym.policies.base import Policy
from orsd_gym.rollout.trajectory import Trajectory, sampled_temperature

LossAgg = Literal["token-mean", "seq-mean-token-mean"]


@dataclass
class GRPOConfig:
    """GRPO settings; the defaults are the standard GRPO/PPO ones."""

    #: PPO ratio clip range [1 - clip_low, 1 + clip_high].
    clip_low: float = 0.2
    #: Upper PPO ratio clip: 1 + clip_high (a larger value than clip_low is DAPO's clip-higher).
    clip_high: float = 0.2
    #: "token-mean": every sampled token of the mini-batch weighs the same; "seq-mean-token-mean": a mean per
    #: sequence, then over sequences.
    loss_agg: LossAgg = "token-mean"
    #: Divide centred rewards by the group std (False: centring only, as Dr.GRPO's advantage;
    #: Dr.GRPO's loss also sums tokens over a constant instead of a mean, which `loss_agg` does not offer).
    norm_std: bool = True
    #: Added to the group std before dividing (a group of equal rewards has advantage 0 either way).
    eps: float = 1e-6
    #: Weight of the k3 KL estimator against the frozen `reference` policy (0: no reference needed).
    kl_coef: float = 0.0
    #: Weight of an entropy bonus on the sampled tokens (0: none).
    entropy_coef: float = 0.0
    #: How an episode's reward is made from its outcome and per-turn penalties.
    reward: RewardConfig = field(default_factory=RewardConfig)

    def __post_init__(self) -> None:
        if not 0 <= self.clip_low < 1 or self.clip_high < 0:
            raise ValueError(f"need 0 <= clip_low < 1 and clip_high >= 0, got {self.clip_low}, {self.clip_high}")
        if self.eps <= 0:
            raise ValueError(f"eps must be > 0, got {self.eps}")
        if self.kl_coef < 0:
            raise ValueError(f"kl_coef must be >= 0, got {self.kl_coef}")

    @property
    def needs_reference(self) -> bool:
        """A frozen reference policy is needed (for the KL term)."""
        return self.kl_coef > 0

    @property
    def needs_verifier(self) -> bool:
        """A frozen verifier policy is needed (ORSD's judge)."""
        return False

    @property
    def needs_expert_plans(self) -> bool:
        """The trajectories must carry the env's expert plan (ORSD's expert-rubric control)."""
        return False


# --------------------------------------------------------------------------- equations


def group_advantages(rewards: Sequence[float], *, norm_std: bool = True, eps: float = 1e-6) -> np.ndarray:
    """Group-relative advantage of each attempt; exactly 0 for every attempt when all rewards are equal.

    The std is the sample std (ddof=1), as in the reference GRPO implementations.
    """
    r = np.asarray(rewards, dtype=np.float64)
    if r.ndim != 1 or not np.all(np.isfinite(r)):
        raise ValueError(f"rewards must be a finite 1-D sequence, got {rewards!r}")
    if r.size < 2 or np.all(r == r[0]):
        return np.zeros_like(r)
    centred = r - r.mean()
    if norm_std:
        centred = centred / (r.std(ddof=1) + eps)
    return centred


def episode_groups(trajectories: Sequence[Trajectory]) -> dict[int, list[list[int]]]:
    """group_id -> the attempts (episodes) of the group, each a list of its trajectory indices.

    In the per-step layout an episode is several samples sharing one ``episode_id``; in the
    sequence layout each trajectory is one episode.
    """
    groups: dict[int, list[list[int]]] = {}
    where: dict[int, list[int]] = {}
    for index, trajectory in enumerate(trajectories):
        if trajectory.episode_id not in where:
            where[trajectory.episode_id] = []
            groups.setdefault(trajectory.group_id, []).append(where[trajectory.episode_id])
        where[trajectory.episode_id].append(index)
    return groups


def sampler_logprobs(trajectories: Sequence[Trajectory]) -> list[torch.Tensor]:
    """Each trajectory's sampling-time log-probs on its sampled tokens (float32, 0 elsewhere)."""
    return [torch.as_tensor(t.logprobs, dtype=torch.float32) * torch.as_tensor(t.loss_mask) for t in trajectories]


def samples_as_it_updates(policy: Policy) -> bool:
    """Whether the sampler's log-probs can be PPO's old log-probs as they are.

    Where the policy samples and updates in float32 they are exact (cached decoding and a full
    pass agree to ~1e-5). Otherwise (bfloat16 sampling, or updates in a 16-bit dtype) they
    differ from what the update computes by more than a PPO ratio may tolerate, mostly on the
    uncertain tokens that carry the gradient, so the update scores the sampled tokens again
    without gradients, as its loss will (`GRPO.score_loss_inputs`): the first step's ratio is
    then exactly 1, whatever the sampling precision.
    """
    return policy.dtype == policy.update_dtype == torch.float32


def broadcast_advantage(advantage: float, loss_mask: Sequence[int]) -> torch.Tensor:
    """The sequence-level advantage on every mask-1 token (float32, 0 elsewhere)."""
    mask = torch.as_tensor(loss_mask, dtype=torch.float32)
    return mask * float(advantage)


def ppo_clip_loss(
    new_logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    clip_low: float,
    clip_high: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token clipped-surrogate loss and a bool tensor marking tokens where the clip is active."""
    ratio = torch.exp(new_logprobs - old_logprobs)
    unclipped = ratio * advantages
    clipped = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high) * advantages
    loss = -torch.minimum(unclipped, clipped)
    return loss, clipped < unclipped


def kl_k3(new_logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """Low-variance, non-negative estimator of KL(pi || pi_ref) per token (Schulman's k3)."""
    log_ratio = ref_logprobs - new_logprobs
    return torch.exp(log_ratio) - log_ratio - 1.0


def aggregate(
    per_token: Sequence[torch.Tensor], masks: Sequence[torch.Tensor], mode: LossAgg, normaliser: float
) -> torch.Tensor:
    """Sum of a micro-batch's masked per-token losses, divided by the mini-batch ``normaliser``.

    ``normaliser`` is the mini-batch's mask-1 token count (token-mean) or sequence count
    (seq-mean-token-mean); see `minibatch_normaliser`.
    """
    total = per_token[0].new_zeros(()) if per_token else torch.zeros(())
    for loss, mask in zip(per_token, masks, strict=True):
        masked = (loss * mask).sum()
        if mode == "seq-mean-token-mean":
            masked = masked / mask.sum().clamp(min=1.0)
        total = total + masked
    return total / max(normaliser, 1.0)


def minibatch_normaliser(loss_masks: Sequence[Sequence[int]], mode: LossAgg) -> float:
    if mode == "token-mean":
        return float(sum(sum(mask) for mask in loss_masks))
    return float(len(loss_masks))


# --------------------------------------------------------------------------- the algorithm


@register_algorithm
class GRPO(Algorithm):
    """Group Relative Policy Optimisation with a PPO-clipped surrogate."""

    name = "grpo"
    config_class = GRPOConfig
    config: GRPOConfig
    summed_metrics = frozenset({"num_groups"})

    def __init__(self, config=None, *, reference: Policy | None = None, verifier: Policy | None = None) -> None:
        super().__init__(config, reference=reference, verifier=verifier)
        if self.config.kl_coef > 0 and reference is None:
            raise ValueError("kl_coef > 0 needs a frozen reference policy: pass reference=policy.copy_frozen()")

    def prepare(
        self,
        trajectories: Sequence[Trajectory],
        policy: Policy,
        *,
        iteration: int,
        rng: np.random.Generator,
        peers: Peers = SOLO,
    ) -> PreparedBatch:
        return self.grpo_prepare(trajectories, policy)

    def grpo_prepare(self, trajectories: Sequence[Trajectory], policy: Policy) -> PreparedBatch:
        """Rewards, GRPO advantages per token, old (and reference) log-probs."""
        trajectories = list(trajectories)
        if not trajectories:
            raise ValueError("prepare needs at least one trajectory")
        for index, trajectory in enumerate(trajectories):
            n = len(trajectory.token_ids)
            if len(trajectory.loss_mask) != n or len(trajectory.logprobs) != n:
                raise ValueError(
                    f"trajectory {index}: token_ids/loss_mask/logprobs lengths differ "
                    f"({n}/{len(trajectory.loss_mask)}/{len(trajectory.logprobs)})"
                )
        rewards = [trajectory_reward(t, self.config.reward) for t in trajectories]
        sequence_adv = [0.0] * len(trajectories)
        groups = episode_groups(trajectories)
        zero_groups = 0
        for episodes in groups.values():
            # One reward per attempt: per-step samples of an episode share its advantage.
            adv = group_advantages(
                [rewards[e[0]] for e in episodes], norm_std=self.config.norm_std, eps=self.config.eps
            )
            zero_groups += int(not np.any(adv))
            for samples, a in zip(episodes, adv, strict=True):
                for i in samples:
                    sequence_adv[i] = float(a)
        advantages = [broadcast_advantage(a, t.loss_mask) for a, t in zip(sequence_adv, trajectories, strict=True)]
        outcome = [a.clone() for a in advantages]
        # The update scores these with its own micro-batches (`score_loss_inputs`); the KL
        # reference always, since only its own packing makes the first step's KL exactly 0.
        unscored = set() if samples_as_it_updates(policy) else {"old_logprobs"}
        if self.config.kl_coef > 0:
            unscored.add("ref_logprobs")
        # Per episode (its first sample), whatever the layout.
        firsts = [episode[0] for episodes in groups.values() for episode in episodes]
        metrics = {
            "reward_mean": float(np.mean([rewards[i] for i in firsts])),
            "num_groups": float(len(groups)),
            "zero_adv_group_frac": zero_groups / len(groups),
            "adv_abs_mean": float(np.mean([abs(sequence_adv[i]) for i in firsts])),
        }
        return PreparedBatch(
            trajectories=trajectories,
            rewards=rewards,
            advantages=advantages,
            old_logprobs=sampler_logprobs(trajectories),
            metrics=metrics,
            audit=[],
            outcome_advantages=outcome,
            unscored=frozenset(unscored),
        )

    def score_loss_inputs(self, policy: Policy, batch: PreparedBatch, micro_batches: Sequence[Sequence[int]]) -> None:
        """PPO's old log-probs and the KL reference's, where unscored (see `Algorithm.score_loss_inputs`)."""
        if not batch.unscored:
            return
        rows = sorted(i for micro in micro_batches for i in micro)
        if rows != list(range(len(batch.trajectories))):
            raise ValueError(
                f"score_loss_inputs needs micro-batches that hold each of the batch's {len(batch.trajectories)} rows "
                f"once, got rows {rows}"
            )
        if "old_logprobs" in batch.unscored:
            batch.old_logprobs = self._score_as_loss(policy, batch, micro_batches)
        if "ref_logprobs" in batch.unscored:
            assert self.reference is not None
            batch.ref_logprobs = self._score_as_loss(self.reference, batch, micro_batches)
        batch.unscored = frozenset()

    def _score_as_loss(
        self, policy: Policy, batch: PreparedBatch, micro_batches: Sequence[Sequence[int]]
    ) -> list[torch.Tensor]:
        """Every row's log-probs under ``policy`` without gradients, in the update dtype, one
        call per micro-batch with its rows in `loss`'s order."""
        scored = [torch.zeros(0)] * len(batch.trajectories)
        for micro in micro_batches:
            rows = [batch.trajectories[i] for i in micro]
            logprobs = policy.score(
                [t.token_ids for t in rows],
                [t.loss_mask for t in rows],
                temperature=sampled_temperature(rows),
                precision="update",
            )
            for i, row in zip(micro, logprobs, strict=True):
                scored[i] = row.detach().float().cpu()
        return scored

    def has_learning_signal(self, batch: PreparedBatch) -> bool:
        # The KL and entropy terms pull on the policy whatever the advantages are.
        return self.config.kl_coef > 0 or self.config.entropy_coef > 0 or super().has_learning_signal(batch)

    def minibatch_weight(self, batch: PreparedBatch, minibatch_indices: Sequence[int]) -> float:
        return minibatch_normaliser([batch.trajectories[i].loss_mask for i in minibatch_indices], self.config.loss_agg)

    def loss(
        self,
        policy: Policy,
        batch: PreparedBatch,
        micro_indices: Sequence[int],
        *,
        minibatch_indices: Sequence[int],
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """Micro-batch loss; metrics are means over the micro-batch's mask-1 tokens (``tokens``: their count)."""
        cfg = self.config
        micro = list(micro_indices)
        missing = set(micro) - set(minibatch_indices)
        if missing:
            raise ValueError(f"micro-batch indices {sorted(missing)} are not in the mini-batch")
        if batch.unscored:
            raise ValueError(
                f"the batch's {' and '.join(sorted(batch.unscored))} are not scored yet: an update scores them before "
                "its first step (orsd_gym.train.update.score_loss_inputs); outside one, call "
                "algorithm.score_loss_inputs(policy, batch, micro_batches) first, with the micro-batches you will pass"
            )
        trajs = [batch.trajectories[i] for i in micro]
        normaliser = minibatch_normaliser([batch.trajectories[i].loss_mask for i in minibatch_indices], cfg.loss_agg)
        scored = policy.score(
            [t.token_ids for t in trajs],
            [t.loss_mask for t in trajs],
            with_grad=True,
            return_entropy=cfg.entropy_coef > 0,
            temperature=sampled_temperature(trajs),
        )
        new_lps, entropies = scored if cfg.entropy_coef > 0 else (scored, None)
        per_token, masks = [], []
        clip_count = tokens = 0.0
        kl_sum = approx_kl_sum = entropy_sum = pg_sum = 0.0
        for k, (i, new_lp) in enumerate(zip(micro, new_lps, strict=True)):
            mask = torch.as_tensor(batch.trajectories[i].loss_mask, dtype=new_lp.dtype, device=new_lp.device)
            old = batch.old_logprobs[i].to(new_lp)
            adv = batch.advantages[i].to(new_lp)
            loss, clipped = ppo_clip_loss(new_lp, old, adv, cfg.clip_low, cfg.clip_high)
            pg_sum += float((loss.detach() * mask).sum())
            if cfg.kl_coef > 0:
                kl = kl_k3(new_lp, batch.ref_logprobs[i].to(new_lp))
                loss = loss + cfg.kl_coef * kl
                kl_sum += float((kl.detach() * mask).sum())
            if entropies is not None:
                entropy = entropies[k].to(new_lp)
                loss = loss - cfg.entropy_coef * entropy
                entropy_sum += float((entropy.detach() * mask).sum())
            per_token.append(loss)
            masks.append(mask)
            tokens += float(mask.sum())
            clip_count += float((clipped.float() * mask).sum())
            approx_kl_sum += float(((old - new_lp.detach()) * mask).sum())
        total = aggregate(per_token, masks, cfg.loss_agg, normaliser)
        denom = max(tokens, 1.0)
        metrics = {
            "tokens": tokens,
            "loss/pg": pg_sum / denom,
            "policy/clip_frac": clip_count / denom,
            "policy/approx_kl_old": approx_kl_sum / denom,
        }
        if cfg.kl_coef > 0:
            metrics["policy/kl_ref"] = kl_sum / denom
        if entropies is not None:
            metrics["policy/entropy"] = entropy_sum / denom
        return total, metrics
