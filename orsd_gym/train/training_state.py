"""What a checkpoint saves and a resumed run restores: the trainable weights, the optimiser and
its schedule, the algorithm's state and every worker's torch RNG state (the file format:
`orsd_gym.train.checkpoint`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from orsd_gym.train.checkpoint import Checkpoint, join_optimizer_state, save_checkpoint, split_optimizer_state
from orsd_gym.train.update import apply_optim_settings

if TYPE_CHECKING:
    from orsd_gym.algos.base import Algorithm
    from orsd_gym.policies.base import Policy
    from orsd_gym.train.config import OptimConfig


@dataclass
class TrainingState:
    """The objects whose state a checkpoint holds."""

    policy: Policy
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    algorithm: Algorithm

    def restore(self, checkpoint: Checkpoint, optim: OptimConfig, rank: int) -> dict[str, Any]:
        """Load ``checkpoint`` into every object and worker ``rank``'s RNG state, with ``optim``'s
        settings over the restored optimiser's; returns the checkpoint's state record."""
        state = checkpoint.state
        self.policy.load_state_dict(checkpoint.policy_state)
        self.optimizer.load_state_dict(join_optimizer_state(checkpoint.optimizer_tensors, state["optimizer"]))
        self.scheduler.load_state_dict(state["scheduler"])
        apply_optim_settings(self.optimizer, self.scheduler, optim)
        self.algorithm.load_state_dict(state.get("algorithm", {}))
        rng = state.get("worker_torch_rng", [state["torch_rng"]])[rank]
        torch.set_rng_state(torch.tensor(rng, dtype=torch.uint8))
        return state

    def save(self, root: Path, iteration: int, rngs: list[list[int]], run: dict[str, Any], keep: int) -> None:
        """Write checkpoint ``iteration`` under ``root`` (keeping the newest ``keep``): the
        objects' states, every worker's RNG state (``rngs``, by rank) and ``run``'s record
        (its config, environment steps, metrics offset)."""
        tensors, optimizer_rest = split_optimizer_state(self.optimizer.state_dict())
        state = {
            "iteration": iteration,
            "config": run["config"],
            "optimizer": optimizer_rest,
            "scheduler": self.scheduler.state_dict(),
            "algorithm": self.algorithm.state_dict(),
            "torch_rng": rngs[0],
            "env_steps": run["env_steps"],
            "metrics_offset": run["metrics_offset"],
        }
        if len(rngs) > 1:
            state["worker_torch_rng"] = rngs
        save_checkpoint(
            root, iteration, policy_state=self.policy.state_dict(), optimizer_tensors=tensors, state=state, keep=keep
        )
