"""Summary statistics of a batch of trajectories (for training and evaluation metrics).

Episode statistics (success, return, length, invalid actions, truncation, env steps) count
each episode once, whatever the layout: per-step samples of one episode share its
``episode_id``. Token counts are per sample (what the model generated and trains on).
Episodes played on remote envs (Ray actors) also count how often a lost env made them replay
(``env_replays``, only reported for them).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from orsd_gym.rollout.trajectory import Trajectory, episodes_of


def rollout_stats(trajectories: Sequence[Trajectory]) -> dict[str, float]:
    """Success rate, mean return, episode length, invalid-action and format-error rates,
    truncated fraction and environment steps per episode; tokens generated per sample;
    observations cut to leave the model's turn its room (`orsd_gym.rollout.fit`), in all."""
    episodes = episodes_of(trajectories)
    if not episodes:
        return {
            "success_rate": 0.0,
            "mean_return": 0.0,
            "episode_len": 0.0,
            "invalid_action_rate": 0.0,
            "format_error_rate": 0.0,
            "tokens_generated": 0.0,
            "truncated_frac": 0.0,
            "env_steps": 0.0,
            "observations_cut": 0.0,
        }
    step_infos = [info for t in episodes for info in t.infos[1:]]
    invalid = sum(1 for info in step_infos if not info.get("is_valid_action", True))
    format_flags = [flag for t in episodes for flag in t.format_valid]
    stats = {
        "success_rate": float(np.mean([t.success for t in episodes])),
        "mean_return": float(np.mean([t.episode_return for t in episodes])),
        "episode_len": float(np.mean([t.num_turns for t in episodes])),
        "invalid_action_rate": invalid / max(1, len(step_infos)),
        "format_error_rate": (1.0 - float(np.mean(format_flags))) if format_flags else 0.0,
        "tokens_generated": float(sum(sum(t.loss_mask) for t in trajectories)),
        "truncated_frac": float(np.mean([t.truncated for t in episodes])),
        "env_steps": float(sum(t.num_turns for t in episodes)),
        "observations_cut": float(sum(t.extra.get("observations_cut", 0) for t in episodes)),
    }
    if any("env_replays" in t.extra for t in episodes):
        stats["env_replays"] = float(sum(t.extra.get("env_replays", 0) for t in episodes))
    return stats
