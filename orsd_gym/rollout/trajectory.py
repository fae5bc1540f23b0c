"""`Trajectory`: one episode as one token sequence, the unit every algorithm learns from.

Masks are made by construction while the episode is played (see `orsd_gym.rollout`):
model-sampled tokens get ``loss_mask == 1`` and their sampling log-probs; the prompt, the chat
template's bridges and the env's observations get ``loss_mask == 0`` (log-prob 0.0).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

from orsd_gym.writable import write_with

SpanKind = Literal["prompt", "model", "env"]


@dataclass
class TurnSpan:
    """A half-open token range ``[start, end)`` of the trajectory and who produced it."""

    kind: SpanKind
    start: int
    end: int


@dataclass(kw_only=True)
class EpisodeRecord:
    """What one attempt at a task did, step by step: the collector fills it while the episode
    plays, and every sample of the episode (`Trajectory`) carries it."""

    #: Environment reward after each action (one entry per env step).
    rewards: list[float] = field(default_factory=list)
    #: The env's info dict after each step (JSON-safe copies), reset info first.
    infos: list[dict[str, Any]] = field(default_factory=list)
    #: Decoded text of each model turn, the action sent to the env, and each observation
    #: (observations[0] is the first one); rubric prompts render attempts from these.
    model_turns: list[str] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)
    observations: list[str] = field(default_factory=list)
    task: str = ""
    env_id: str = ""
    task_id: int = -1
    seed: int = 0
    group_id: int = 0
    #: The episode (unique within one `collect` call).
    episode_id: int = 0
    success: bool = False
    terminated: bool = False
    truncated: bool = False
    #: True for each model turn whose action could be parsed.
    format_valid: list[bool] = field(default_factory=list)
    #: The user turn the model was shown after each of its turns (the observation with the
    #: env prompt's additions), in the order of the trajectory's env spans (sequence layout).
    observation_messages: list[str] = field(default_factory=list)

    @property
    def finished(self) -> bool:
        return self.terminated or self.truncated


@dataclass(kw_only=True)
class Trajectory(EpisodeRecord):
    """One training sample: tokens, masks, log-probs and what the env said, for one attempt at a task.

    In the sequence layout a sample is a whole episode; in the per-step layout each step of an
    episode is a sample (``step`` = 0, 1, ...) and all of them share ``episode_id`` and repeat
    the episode's record (rewards, actions, observations). Per-episode statistics count
    ``episode_id``s, never samples.
    """

    token_ids: list[int]
    loss_mask: list[int]
    logprobs: list[float]
    spans: list[TurnSpan]
    #: The temperature ``logprobs`` were sampled at; losses and replays score the tokens at it,
    #: so that ratios compare like with like (records that predate the field were sampled at 1.0).
    temperature: float = 1.0
    #: The chat messages rendered into the prompt span (system + first user turn), so an
    #: algorithm can re-render the prompt with privileged context (ORSD's rubric).
    prompt_messages: list[dict[str, str]]
    #: The step this sample is (per-step layout), None when the sample is the whole episode.
    step: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of_episode(cls, record: EpisodeRecord, **sample: Any) -> Trajectory:
        """A sample of ``record``'s episode: the record's fields (lists copied, so samples never
        share them) and the sample's own (``sample`` may also replace a record field)."""
        episode = {f.name: copy.copy(getattr(record, f.name)) for f in fields(EpisodeRecord)}
        return cls(**{**episode, **sample})

    @property
    def episode_return(self) -> float:
        return float(sum(self.rewards))

    @property
    def num_turns(self) -> int:
        return len(self.actions)

    def model_spans(self) -> list[TurnSpan]:
        return [span for span in self.spans if span.kind == "model"]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Trajectory:
        data = dict(data)
        data["spans"] = [TurnSpan(**span) for span in data["spans"]]
        return cls(**data)


def sampled_temperature(trajectories: Sequence[Trajectory]) -> float:
    """The one temperature ``trajectories`` were sampled at (what scoring them for a loss or a
    replay must use); `ValueError` when they differ or were sampled greedily (a greedy token's
    log-prob is 0 whatever the model thinks: nothing to learn from)."""
    temperatures = {t.temperature for t in trajectories}
    if len(temperatures) != 1:
        raise ValueError(f"samples scored together must share a sampling temperature, got {sorted(temperatures)}")
    (temperature,) = temperatures
    if temperature <= 0:
        raise ValueError("greedy samples (temperature 0) have no usable log-probs for a loss")
    return temperature


def save_jsonl(trajectories: Iterable[Trajectory], path: str | Path) -> None:
    """Write one JSON object per trajectory (the whole file or, on a failed write, none of it)."""

    def write(partial: Path) -> None:
        with open(partial, "w", encoding="utf-8") as handle:
            for trajectory in trajectories:
                handle.write(json.dumps(trajectory.to_dict(), ensure_ascii=False) + "\n")

    write_with(path, "trajectories", write)


def load_jsonl(path: str | Path) -> list[Trajectory]:
    """Read trajectories written by `save_jsonl`."""
    with open(path, encoding="utf-8") as handle:
        return [Trajectory.from_dict(json.loads(line)) for line in handle if line.strip()]


def episodes_of(trajectories: Sequence[Trajectory]) -> list[Trajectory]:
    """One sample per episode (its first), in first-seen order: what per-episode statistics count."""
    seen: set[int] = set()
    firsts = []
    for trajectory in trajectories:
        if trajectory.episode_id not in seen:
            seen.add(trajectory.episode_id)
            firsts.append(trajectory)
    return firsts


def group_by(trajectories: Sequence[Trajectory]) -> dict[int, list[Trajectory]]:
    """Trajectories keyed by ``group_id`` (GRPO groups), in first-seen order."""
    groups: dict[int, list[Trajectory]] = {}
    for trajectory in trajectories:
        groups.setdefault(trajectory.group_id, []).append(trajectory)
    return groups
