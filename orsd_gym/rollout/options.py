"""`RolloutOptions`: how a policy's turns become env actions and training samples.

One typed record for how `orsd_gym.rollout.collect` plays (layout, action format, budgets, the
KV cache), validated when it is made; the trainer's rollout config extends it
(`orsd_gym.train.config.RolloutConfig`), so a YAML ``rollout:`` section and a Python call take
the same fields. Which envs a call plays on is its `EnvSetup`; how it samples, its
`SamplingParams`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from orsd_gym.rollout.actions import PARSERS, ActionParser

Layout = Literal["sequence", "per_step"]
OnUnparsable = Literal["as_is", "noop"]


@dataclass
class RolloutOptions:
    """Rollout settings (the defaults are `collect`'s)."""

    #: "sequence": an episode is one token sequence; "per_step": one sample per step (a fresh
    #: prompt of the task, the last `history` steps and the current observation).
    layout: Layout = "sequence"
    #: With layout "per_step": the previous steps each sample shows.
    history: int = 3
    #: How an action is read from a turn: "tag" (<action>...</action>), "last_line", or
    #: "admissible" (a choice from the env's admissible actions, shown as a numbered list);
    #: or an `ActionParser` of your own.
    action_format: str | ActionParser = "tag"
    #: What an unparsable turn sends: the text as is, or the env's no-op action.
    on_unparsable: OnUnparsable = "as_is"
    #: The no-op for ``on_unparsable="noop"`` (None: the env prompt's own).
    noop_action: str | None = None
    #: Model turns per episode (None: until the env ends it).
    max_turns: int | None = 10
    #: Tokens per sample (the prompt, every turn and every observation it holds).
    max_episode_tokens: int = 2048
    #: Reuse each episode's previous turns through a generation session (same tokens either way).
    kv_cache: bool = True

    def __post_init__(self) -> None:
        if self.layout not in ("sequence", "per_step"):
            raise ValueError(f"layout={self.layout!r}; choose 'sequence' or 'per_step'")
        if self.history < 0:
            raise ValueError(f"history must be >= 0, got {self.history}")
        if isinstance(self.action_format, str) and self.action_format not in PARSERS:
            raise ValueError(
                f"action_format={self.action_format!r}; choose one of {sorted(PARSERS)} or pass an ActionParser"
            )
        if self.on_unparsable not in ("as_is", "noop"):
            raise ValueError(f"on_unparsable={self.on_unparsable!r}; choose 'as_is' or 'noop'")
        if self.max_turns is not None and self.max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {self.max_turns}")
        if self.max_episode_tokens < 2:
            raise ValueError(f"max_episode_tokens must be >= 2, got {self.max_episode_tokens}")
