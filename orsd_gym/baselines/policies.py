"""DRRN-style stable-baselines3 policies for `AdmissibleChoice` observations.

DRRN (He et al., 2016, "Deep Reinforcement Learning with a Natural Language Action Space")
embeds the state and every candidate action separately and scores each action by the dot
product of the two embeddings. A slot index then carries no fixed meaning: the same action text
scores the same wherever the wrapper put it, and the number of candidates can vary per state.

* `DRRNFeatures`: the features extractor (state MLP, shared action MLP, and the slot mask).
* `SlotScores`: ``<state, action_i> / sqrt(hidden)`` per slot; empty slots get -1e8.
* `MaskableDRRNPolicy` (sb3-contrib MaskablePPO), `DRRNActorCriticPolicy` (PPO, A2C) and
  `DRRNQPolicy` (DQN): the scores are the action logits, or the Q-values.

Sizes: ``policy_kwargs={"features_extractor_kwargs": {"hidden_dim": 64}}``; SB3's ``net_arch``
is not used (the heads are fixed: dot products for the actor, one Tanh layer for the critic).

Because the slot mask is part of the observation, the scores of empty slots are -1e8 in every
variant: plain PPO never samples them and DQN's greedy choice never picks them, even though SB3
has no masking API for either (MaskablePPO additionally masks through ``action_masks()``).
"""

from __future__ import annotations

import math
from typing import Any

import torch as th
from gymnasium import spaces
from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy
from stable_baselines3.common.policies import ActorCriticPolicy
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from stable_baselines3.dqn.policies import DQNPolicy, QNetwork
from torch import nn

#: The score of an empty slot (sb3-contrib uses the same value for masked logits).
EMPTY_SLOT_SCORE = -1e8


def _mlp(in_dim: int, hidden_dim: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(in_dim, hidden_dim), nn.ReLU(), nn.Linear(hidden_dim, hidden_dim))


class DRRNFeatures(BaseFeaturesExtractor):
    """Encodes ``state`` and each of the K ``actions`` (one shared MLP) to ``hidden_dim`` vectors.

    The output is the flat concatenation ``[state (h), actions (K*h), mask (K)]``, the layout that
    `SlotScores` and the critic read back with `split_features`.
    """

    def __init__(self, observation_space: spaces.Dict, hidden_dim: int = 64) -> None:
        max_actions, dim = observation_space["actions"].shape
        super().__init__(observation_space, features_dim=hidden_dim * (max_actions + 1) + max_actions)
        self.hidden_dim = hidden_dim
        self.max_actions = max_actions
        self.state_net = _mlp(observation_space["state"].shape[0], hidden_dim)
        self.action_net = _mlp(dim, hidden_dim)

    def forward(self, observations: dict[str, th.Tensor]) -> th.Tensor:
        state = self.state_net(observations["state"])
        actions = self.action_net(observations["actions"])
        return th.cat([state, actions.flatten(1), observations["action_mask"].float()], dim=1)


def split_features(features: th.Tensor, hidden_dim: int, max_actions: int) -> tuple[th.Tensor, th.Tensor, th.Tensor]:
    """``(state [B, h], actions [B, K, h], mask [B, K] bool)`` from `DRRNFeatures` output."""
    state = features[:, :hidden_dim]
    actions = features[:, hidden_dim : hidden_dim * (max_actions + 1)].reshape(-1, max_actions, hidden_dim)
    mask = features[:, hidden_dim * (max_actions + 1) :] > 0.5
    return state, actions, mask


class SlotScores(nn.Module):
    """The DRRN score of each slot: ``<state, action_i> / sqrt(hidden_dim)``, -1e8 for empty slots.

    The ``sqrt`` scaling (as in attention) keeps the initial logits near zero, so the initial
    policy is close to uniform over the filled slots.
    """

    def __init__(self, hidden_dim: int, max_actions: int) -> None:
        super().__init__()
        self.hidden_dim = hidden_dim
        self.max_actions = max_actions

    def forward(self, features: th.Tensor) -> th.Tensor:
        state, actions, mask = split_features(features, self.hidden_dim, self.max_actions)
        scores = th.einsum("bkh,bh->bk", actions, state) / math.sqrt(self.hidden_dim)
        return scores.masked_fill(~mask, EMPTY_SLOT_SCORE)


class DRRNHeads(nn.Module):
    """SB3's ``mlp_extractor`` for DRRN: the actor latent is the slot scores, the critic's an MLP of the state."""

    def __init__(self, hidden_dim: int, max_actions: int) -> None:
        super().__init__()
        self.hidden_dim = hidden_dim
        self.max_actions = max_actions
        self.latent_dim_pi = max_actions
        self.latent_dim_vf = hidden_dim
        self.scores = SlotScores(hidden_dim, max_actions)
        self.value = nn.Sequential(nn.Linear(hidden_dim, hidden_dim), nn.Tanh())

    def forward(self, features: th.Tensor) -> tuple[th.Tensor, th.Tensor]:
        return self.forward_actor(features), self.forward_critic(features)

    def forward_actor(self, features: th.Tensor) -> th.Tensor:
        return self.scores(features)

    def forward_critic(self, features: th.Tensor) -> th.Tensor:
        state, _, _ = split_features(features, self.hidden_dim, self.max_actions)
        return self.value(state)


class _DRRNActorCriticMixin:
    """Turns an SB3 actor-critic policy into DRRN: `DRRNFeatures` in, slot scores as the logits."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("features_extractor_class", DRRNFeatures)
        super().__init__(*args, **kwargs)

    def _build_mlp_extractor(self) -> None:
        extractor = self.pi_features_extractor
        self.mlp_extractor = DRRNHeads(extractor.hidden_dim, extractor.max_actions)

    def _build(self, lr_schedule: Any) -> None:
        super()._build(lr_schedule)
        # SB3 puts a Linear layer on the actor latent; here the latent already is the logits, and
        # a Linear would give each slot index a learned, fixed meaning. Drop it and rebuild the
        # optimizer so it holds only the parameters in use.
        self.action_net = nn.Identity()
        self.optimizer = self.optimizer_class(self.parameters(), lr=lr_schedule(1), **self.optimizer_kwargs)


class MaskableDRRNPolicy(_DRRNActorCriticMixin, MaskableActorCriticPolicy):
    """DRRN actor-critic for sb3-contrib's MaskablePPO."""


class DRRNActorCriticPolicy(_DRRNActorCriticMixin, ActorCriticPolicy):
    """DRRN actor-critic for SB3's PPO and A2C (empty slots are masked by the observation's mask)."""


class DRRNQPolicy(DQNPolicy):
    """DRRN Q-network for SB3's DQN: Q(s, slot i) = the slot's DRRN score."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("features_extractor_class", DRRNFeatures)
        super().__init__(*args, **kwargs)

    def make_q_net(self) -> QNetwork:
        q_net = super().make_q_net()
        extractor = q_net.features_extractor
        # Replace SB3's MLP head before DQNPolicy._build creates the optimizer.
        q_net.q_net = SlotScores(extractor.hidden_dim, extractor.max_actions)
        return q_net.to(self.device)
