"""Summary statistics of a batch of trajectories (for training and evaluation metrics)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from orsd_gym.rollout.trajectory import Trajectory


def rollout_stats(trajectories: Sequence[Trajectory]) -> dict[str, float]:
    """Success rate, mean return, episode length, invalid-action and format-error rates,
    tokens generated and environment steps of a batch."""
    if not trajectories:
        return {"success_rate": 0.0, "mean_return": 0.0, "episode_len": 0.0, "invalid_action_rate": 0.0,
                "format_error_rate": 0.0, "tokens_generated": 0.0, "truncated_frac": 0.0, "env_steps": 0.0}
    steps = sum(t.num_turns for t in trajectories)
    step_infos = [info for t in trajectories for info in t.infos[1:]]
    invalid = sum(1 for info in step_infos if not info.get("is_valid_action", True))
    format_flags = [flag for t in trajectories for flag in t.format_valid]
    return {
        "success_rate": float(np.mean([t.success for t in trajectories])),
        "mean_return": float(np.mean([t.episode_return for t in trajectories])),
        "episode_len": float(np.mean([t.num_turns for t in trajectories])),
        "invalid_action_rate": invalid / max(1, len(step_infos)),
        "format_error_rate": (1.0 - float(np.mean(format_flags))) if format_flags else 0.0,
        "tokens_generated": float(sum(sum(t.loss_mask) for t in trajectories)),
        "truncated_frac": float(np.mean([t.truncated for t in trajectories])),
        "env_steps": float(steps),
    }
