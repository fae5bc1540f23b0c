"""GiGPO: Group-in-Group Policy Optimisation (Feng et al. 2025, arXiv 2505.10978) on top of GRPO.

GRPO compares whole attempts at one task. GiGPO adds a finer comparison inside that group: the
turns that acted in the same state (an *anchor state*: the same key of the observation the turn
acted on, across the group's attempts and within an attempt that came back to a state) are
compared by what followed them. It samples and scores nothing beyond GRPO:

    R_i        = attempt i's reward (`trajectory_reward`);  A^E_i = GRPO's advantage of R_i in its group
    r_{i,t}    = turn t's reward (`turn_rewards`: the same config, sum_t r_{i,t} = R_i)
    G_{i,t}    = sum_{k >= 0} gamma^k r_{i,t+k}                   (the discounted return from turn t on)
    s_{i,t}    = state_key(o_{i,t}, info_{i,t})                     (o_{i,t}: the observation turn t acted on)
    U(s)       = {(j, k) in the task's group : s_{j,k} = s}         (the anchor group of state s)
    A^S_{i,t}  = (G_{i,t} - mean_U G) / (std_U G + eps)             (step_norm "std"; "mean": centring only)
               = 0 where |U| = 1 or every G in U is equal
    A_{i,t}    = A^E_i + omega * A^S_{i,t}    on each sampled token of turn t (0 on prompt and observations)

The loss is GRPO's. Turn t of a trajectory is its t-th model span (sequence layout) or the
sample whose ``step`` is t (per-step layout); in both, o_{i,t} and info_{i,t} are
``observations[t]`` and ``infos[t]`` of the episode's record: the state the turn acted in, not
the history a per-step prompt also shows. The env says what keys a state
(`orsd_gym.envs.presentation.DefaultPresentation.state_key`: its observation text by default).
Anchor groups never leave a task's group, which data-parallel workers never split.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch

from orsd_gym.algos.base import SOLO, Peers, PreparedBatch, register_algorithm
from orsd_gym.algos.grpo import GRPO, GRPOConfig, episode_groups, group_advantages
from orsd_gym.algos.rewards import turn_rewards
from orsd_gym.envs.presentation import StateKey, state_key_for
from orsd_gym.policies.base import Policy
from orsd_gym.rollout.trajectory import Trajectory

#: Characters of an anchor state's key kept in the audit (enough to recognise the state).
STATE_PREVIEW = 160


@dataclass
class GiGPOConfig(GRPOConfig):
    """GRPO's settings plus GiGPO's step level (defaults: the paper's)."""

    #: Discount of the per-turn rewards in a turn's return G_t (the paper's 0.95).
    gamma: float = 0.95
    #: Weight of the step advantage added to the episode advantage (the paper's omega = 1).
    omega: float = 1.0
    #: How a turn's return is normalised within its anchor group: "std" (centred, then divided
    #: by the group's std: the paper's GiGPO with std) or "mean" (centred only: without std). The
    #: episode advantage follows GRPO's ``norm_std``.
    step_norm: Literal["std", "mean"] = "std"

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0.0 <= self.gamma <= 1.0:
            raise ValueError(f"gamma is a discount in [0, 1], got {self.gamma}")
        if self.omega < 0:
            raise ValueError(f"omega must be >= 0, got {self.omega}")


@dataclass(frozen=True)
class Turn:
    """One turn of a task's group: which attempt, which turn of it, the state it acted in, G_t."""

    attempt: int
    turn: int
    state: str
    ret: float


# --------------------------------------------------------------------------- equations


def discounted_returns(rewards: Sequence[float], gamma: float) -> np.ndarray:
    """G_t = r_t + gamma * G_{t+1} for every turn, the last turn's G being its own reward."""
    returns = np.zeros(len(rewards))
    running = 0.0
    for t in reversed(range(len(rewards))):
        running = float(rewards[t]) + gamma * running
        returns[t] = running
    return returns


def anchor_groups(states: Sequence[str]) -> dict[str, list[int]]:
    """State -> the indices of the turns that acted in it, in first-seen order."""
    groups: dict[str, list[int]] = {}
    for index, state in enumerate(states):
        groups.setdefault(state, []).append(index)
    return groups


def step_advantages(
    returns: Sequence[float], states: Sequence[str], *, norm_std: bool = True, eps: float = 1e-6
) -> np.ndarray:
    """A^S of every turn of one task's group: its return's group-relative advantage within its
    anchor group (GRPO's equation on G; exactly 0 for a state acted in once, or where all of a
    state's returns are equal)."""
    advantages = np.zeros(len(returns))
    for members in anchor_groups(states).values():
        advantages[members] = group_advantages([returns[m] for m in members], norm_std=norm_std, eps=eps)
    return advantages


def turn_states(record: Trajectory, state_key: StateKey) -> list[str]:
    """The key of the state each turn of an episode acted in: ``observations[t]`` with ``infos[t]``."""
    return [state_key(record.observations[t], record.infos[t]) for t in range(record.num_turns)]


def turn_token_values(trajectory: Trajectory, per_turn: Sequence[float]) -> torch.Tensor:
    """``per_turn[t]`` on the sampled tokens of turn t (float32, 0 on every other token): the
    sample's own turn in the per-step layout, each model span's in the sequence layout."""
    mask = torch.as_tensor(trajectory.loss_mask, dtype=torch.float32)
    values = torch.zeros_like(mask)
    if trajectory.step is not None:
        values[:] = float(per_turn[trajectory.step])
        return values * mask
    spans = trajectory.model_spans()
    if len(spans) != len(per_turn):
        raise ValueError(
            f"episode {trajectory.episode_id} has {len(spans)} model spans for {len(per_turn)} turns: "
            "a turn's tokens cannot be found"
        )
    for span, value in zip(spans, per_turn, strict=True):
        values[span.start : span.end] = float(value)
    return values * mask


# --------------------------------------------------------------------------- the algorithm


@register_algorithm
class GiGPO(GRPO):
    """Group-in-Group Policy Optimisation: GRPO plus a step advantage within anchor states (module docstring)."""

    name = "gigpo"
    config_class = GiGPOConfig
    config: GiGPOConfig
    run_summaries = {
        "gigpo_anchored_turn_frac": "gigpo/anchored_turn_frac",
        "gigpo_anchor_group_size": "gigpo/anchor_group_size",
        "gigpo_step_adv_abs_mean": "gigpo/step_adv_abs_mean",
        "gigpo_episode_adv_abs_mean": "gigpo/episode_adv_abs_mean",
    }

    @classmethod
    def signal_lines(cls, summary: Mapping[str, Any]) -> list[str]:
        """The share of training turns in an anchor group of more than one turn (the only turns
        it can give a step advantage), and the step advantage beside the episode's."""
        anchored = [
            f"{name}: {run['gigpo_anchored_turn_frac']:.2f} (mean anchor group {run['gigpo_anchor_group_size']:.2f} "
            f"turns; mean |step advantage| {run['gigpo_step_adv_abs_mean']:.3f} beside |episode advantage| "
            f"{run['gigpo_episode_adv_abs_mean']:.3f})"
            for name, run in summary["runs"].items()
            if run.get("gigpo_anchored_turn_frac") is not None
        ]
        if not anchored:
            return []
        return [
            "Share of GiGPO's training turns in an anchor group of more than one turn (a state another turn of the "
            "task's group also acted in), per run, with the advantages per turn: " + ", ".join(anchored) + ". "
            "Where the share is small, GiGPO's advantages are GRPO's."
        ]

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
        batch = self.grpo_prepare(trajectories, policy)
        trajs = batch.trajectories
        step_tokens = [torch.zeros(len(t.token_ids), dtype=torch.float32) for t in trajs]
        keys: dict[str, StateKey] = {}
        tally = dict.fromkeys(("turns", "anchored_turns", "states", "step_abs", "episode_abs"), 0.0)
        for group_id, episodes in episode_groups(trajs).items():
            turns = self._turns(episodes, trajs, keys)
            step = step_advantages(
                [t.ret for t in turns], [t.state for t in turns], norm_std=cfg.step_norm == "std", eps=cfg.eps
            )
            for attempt, samples in enumerate(episodes):
                per_turn = [a for t, a in zip(turns, step, strict=True) if t.attempt == attempt]
                for i in samples:
                    step_tokens[i] = turn_token_values(trajs[i], per_turn)
            episode = group_advantages([batch.rewards[e[0]] for e in episodes], norm_std=cfg.norm_std, eps=cfg.eps)
            _count(tally, turns, step, [episode[t.attempt] for t in turns])
            batch.audit.append(_group_record(group_id, trajs[episodes[0][0]], turns, step))
        batch.advantages = [a + cfg.omega * s for a, s in zip(batch.advantages, step_tokens, strict=True)]
        batch.token_extras["gigpo_step_advantage"] = step_tokens
        batch.metrics.update(_anchor_metrics(peers.all_gather(tally)))
        return batch

    def _turns(self, episodes: list[list[int]], trajs: list[Trajectory], keys: dict[str, StateKey]) -> list[Turn]:
        """Every turn of a task's attempts: its state's key and its discounted return."""
        turns = []
        for attempt, samples in enumerate(episodes):
            record = trajs[samples[0]]  # every sample of an episode carries its whole record
            if record.env_id not in keys:
                keys[record.env_id] = state_key_for(record.env_id)
            states = turn_states(record, keys[record.env_id])
            returns = discounted_returns(turn_rewards(record, self.config.reward), self.config.gamma)
            turns += [Turn(attempt, t, s, float(g)) for t, (s, g) in enumerate(zip(states, returns, strict=True))]
        return turns


def _count(tally: dict[str, float], turns: list[Turn], step: np.ndarray, episode: list[float]) -> None:
    """Add one task group's turns to the batch's totals."""
    sizes = [len(members) for members in anchor_groups([t.state for t in turns]).values()]
    tally["turns"] += len(turns)
    tally["anchored_turns"] += sum(size for size in sizes if size > 1)
    tally["states"] += len(sizes)
    tally["step_abs"] += float(np.abs(step).sum())
    tally["episode_abs"] += float(np.abs(episode).sum())


def _anchor_metrics(tallies: list[dict[str, float]]) -> dict[str, float]:
    """The batch's anchor statistics over every worker's turns (each worker gets the same
    figures, so combining the workers' metrics leaves them as they are)."""
    total = {key: sum(t[key] for t in tallies) for key in tallies[0]}
    turns = max(total["turns"], 1.0)
    return {
        # Turns whose state another turn of the task's group also acted in: where GiGPO has a signal.
        "gigpo/anchored_turn_frac": total["anchored_turns"] / turns,
        "gigpo/anchor_group_size": total["turns"] / max(total["states"], 1.0),
        # Mean |A^S| and mean |A^E| per turn: how much of a turn's credit the step level moves.
        "gigpo/step_adv_abs_mean": total["step_abs"] / turns,
        "gigpo/episode_adv_abs_mean": total["episode_abs"] / turns,
    }


def _group_record(group_id: int, first: Trajectory, turns: list[Turn], step: np.ndarray) -> dict[str, Any]:
    """The audit of one task's group: its anchor groups of more than one turn (JSON-safe)."""
    shared = []
    for state, members in anchor_groups([t.state for t in turns]).items():
        if len(members) > 1:
            shared.append(
                {
                    "state": state[:STATE_PREVIEW],
                    "turns": [[turns[m].attempt, turns[m].turn] for m in members],
                    "returns": [turns[m].ret for m in members],
                    "step_advantages": [float(step[m]) for m in members],
                }
            )
    return {
        "group_id": group_id,
        "task_key": str(first.infos[0].get("task_key", "")) if first.infos else "",
        "turns": len(turns),
        "anchored_turns": sum(len(g["turns"]) for g in shared),
        "anchor_groups": shared,
    }
