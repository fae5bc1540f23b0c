"""`collect`: play G attempts at each task with a policy and return token-level Trajectories.

A *task* is an ``int`` (a reset seed: the env picks the task from it, as in training) or a
`TaskSpec` naming ``task_id`` explicitly (plus a seed for the env's own randomness). The G
episodes of a task reset with the same seed and options (a GRPO group, ``group_id`` = the task's
index in ``tasks``) and differ only by sampling noise.

All active episodes generate in one batch per round (each keeps a `KVSession`, so a turn
encodes only the tokens added since its previous turn); their envs are then stepped together.
Sampling seeds derive from ``seed`` and the round number, so a call is deterministic given its
arguments. Budgets: ``max_turns``, ``sampling.max_new_tokens`` per turn and
``max_episode_tokens`` per sample; an episode cut by any of them is returned with
``truncated=True``, never dropped.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

from orsd_gym.policies.base import Completion, Policy, SamplingParams
from orsd_gym.rollout import prompts
from orsd_gym.rollout.actions import ActionParser, choose_action, get_parser
from orsd_gym.rollout.envpool import EnvSlots
from orsd_gym.rollout.episode import ChatFormat, PerStepEpisode, SequenceEpisode
from orsd_gym.rollout.trajectory import Trajectory

LAYOUTS = ("sequence", "per_step")


@dataclass(frozen=True)
class TaskSpec:
    """A task named explicitly: ``task_id`` of the env's task list, reset with ``seed``."""

    seed: int
    task_id: int | None = None


@dataclass
class _Episode:
    group_id: int
    seed: int
    task_id: int | None
    slot: int = -1
    builder: Any = None
    session: Any = None
    task: str = ""
    prompt_messages: list[dict[str, str]] = field(default_factory=list)
    observations: list[str] = field(default_factory=list)
    infos: list[dict[str, Any]] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)
    model_turns: list[str] = field(default_factory=list)
    format_valid: list[bool] = field(default_factory=list)
    finish_reasons: list[str] = field(default_factory=list)
    terminated: bool = False
    truncated: bool = False
    cut_by: str = ""
    won: bool = False
    reused_tokens: int = 0


def json_safe(value: Any) -> Any:
    """A JSON-serialisable copy of an info value (numpy scalars/arrays become Python values)."""
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, np.ndarray):
        return json_safe(value.tolist())
    if isinstance(value, np.generic):
        return value.item()
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return repr(value)


def expert_teacher(info: dict[str, Any]) -> str:
    """The first action of the env's expert plan (``info["expert_actions"]``, e.g. ALFWorld's planner)."""
    plan = info.get("expert_actions") or []
    if not plan:
        raise ValueError("expert_teacher needs info['expert_actions']: make the env with expert=True")
    return str(plan[0])


def _teacher_completion(fmt: ChatFormat, policy: Policy, text: str) -> Completion:
    eos = policy.tokenizer.eos_token_id
    tokens = fmt.encode(text) + ([int(eos)] if eos is not None else [])
    return Completion(tokens, [0.0] * len(tokens), text, "eos" if eos is not None else "length")


def as_task_spec(task: int | TaskSpec | dict[str, Any]) -> TaskSpec:
    """A task as a `TaskSpec`: an int is a reset seed (the env picks the task from it)."""
    if isinstance(task, TaskSpec):
        return task
    if isinstance(task, dict):
        return TaskSpec(**task)
    if isinstance(task, (int, np.integer)) and not isinstance(task, bool):
        return TaskSpec(seed=int(task))
    raise TypeError(f"a task is an int seed or a TaskSpec(seed, task_id), got {task!r}")


def _round_seed(seed: int, round_index: int) -> int:
    return int(np.random.SeedSequence([seed, round_index]).generate_state(1)[0])


def collect(
    env: str | gym.Env | gym.vector.VectorEnv,
    policy: Policy,
    tasks: Sequence[int | TaskSpec],
    *,
    group_size: int = 4,
    sampling: SamplingParams | None = None,
    max_turns: int | None = None,
    max_episode_tokens: int = 4096,
    seed: int = 0,
    progress: bool = False,
    layout: str = "sequence",
    history: int = 3,
    action_format: str | ActionParser = "tag",
    on_unparsable: str = "as_is",
    noop_action: str | None = None,
    num_envs: int | None = None,
    kv_cache: bool = True,
    env_prompt: prompts.EnvPrompt | None = None,
    env_kwargs: dict[str, Any] | None = None,
    teacher: Callable[[dict[str, Any]], str] | None = None,
) -> list[Trajectory]:
    """Roll out ``group_size`` episodes per task; see the module docstring.

    ``env`` is an env id (``num_envs`` copies are made and closed here), a `gymnasium.Env`
    (copies are made from its spec) or a `VectorEnv` (used as is, one slot per sub-env).
    ``layout="per_step"`` returns one Trajectory per step (``extra["step"]``), each a fresh prompt
    of the task, the last ``history`` steps and the current observation; the episode's rewards,
    actions and observations are repeated on every step sample.

    ``teacher`` (e.g. `expert_teacher` on an env made with ``expert=True``) replaces sampling:
    each model turn is the teacher's action for the latest info, tokenised and closed with the
    end-of-turn token, in exactly the layout a sampled turn would have (demonstrations for
    behaviour cloning; their log-probs are 0).
    """
    if group_size < 1:
        raise ValueError(f"group_size must be >= 1, got {group_size}")
    if layout not in LAYOUTS:
        raise ValueError(f"layout={layout!r}; choose one of {LAYOUTS}")
    if max_turns is not None and max_turns < 1:
        raise ValueError(f"max_turns must be >= 1, got {max_turns}")
    if max_episode_tokens < 2:
        raise ValueError(f"max_episode_tokens must be >= 2, got {max_episode_tokens}")
    if on_unparsable not in ("as_is", "noop"):
        raise ValueError(f"on_unparsable={on_unparsable!r}; choose 'as_is' or 'noop'")
    specs = [as_task_spec(t) for t in tasks]
    sampling = sampling or SamplingParams()
    parser = get_parser(action_format)
    stop = tuple(dict.fromkeys((*sampling.stop, *parser.stop)))
    token_budget = min(max_episode_tokens, getattr(policy, "max_positions", math.inf))

    episodes = [_Episode(g, spec.seed, spec.task_id) for g, spec in enumerate(specs) for _ in range(group_size)]
    if not episodes:
        return []
    slots = EnvSlots(env, min(num_envs or 16, len(episodes)))
    env_id = slots.env_id
    prompt = env_prompt or prompts.env_prompt(env_id)
    if parser.numbered_choices and not prompt.numbered:
        prompt = dataclasses.replace(prompt, numbered=True)
    noop = prompt.noop_action if noop_action is None else noop_action
    fmt = ChatFormat.from_policy(policy)
    use_sessions = kv_cache and "sessions" in inspect.signature(policy.generate).parameters
    system = prompts.system_prompt(prompt, parser.format_instructions)

    def start(episode: _Episode, slot: int) -> None:
        options = {} if episode.task_id is None else {"task_id": episode.task_id}
        observation, info = slots.reset(slot, episode.seed, options)
        episode.slot = slot
        episode.task = str(info.get("task", ""))
        episode.task_id = int(info.get("task_id", episode.task_id if episode.task_id is not None else -1))
        episode.observations.append(observation)
        episode.infos.append(json_safe(info))
        first = prompts.first_message(prompt, observation, info)
        episode.prompt_messages = [{"role": "system", "content": system}, {"role": "user", "content": first}]
        if layout == "sequence":
            episode.builder = SequenceEpisode(fmt, episode.prompt_messages)
        else:
            render = lambda recent, obs, inf, task=episode.task: prompts.per_step_message(prompt, task, recent, obs, inf)  # noqa: E731
            episode.builder = PerStepEpisode(fmt, system, first, render, history, observation)
        if use_sessions:
            from orsd_gym.policies.hf import KVSession

            episode.session = KVSession()

    pending = list(episodes)
    active: list[_Episode] = []
    free = list(range(slots.n))
    bar = _Progress(len(episodes), enabled=progress)
    round_index = 0
    try:
        while pending or active:
            while pending and free:
                episode = pending.pop(0)
                start(episode, free.pop(0))
                active.append(episode)
            # Budget check, then one generate call per distinct per-turn token limit.
            by_limit: dict[int, list[_Episode]] = {}
            for episode in active:
                room = int(token_budget - len(episode.builder.context()))
                if room < 1:
                    episode.truncated, episode.cut_by = True, "max_episode_tokens"
                    if isinstance(episode.builder, SequenceEpisode):
                        # The model never answers the last observation: keep the sample within budget.
                        episode.builder.drop_trailing_observation()
                    continue
                by_limit.setdefault(min(sampling.max_new_tokens, room), []).append(episode)
            completions: dict[int, Completion] = {}
            for limit, batch in sorted(by_limit.items()):
                params = SamplingParams(limit, sampling.temperature, sampling.top_p, stop,
                                        seed=_round_seed(seed, round_index) + limit)
                contexts = [e.builder.context() for e in batch]
                if teacher is not None:
                    outs = [_teacher_completion(fmt, policy, teacher(e.infos[-1])) for e in batch]
                elif use_sessions:
                    outs = policy.generate(contexts, params, sessions=[e.session for e in batch])
                else:
                    outs = policy.generate(contexts, params)
                for episode, out in zip(batch, outs):
                    completions[id(episode)] = out
            round_index += 1
            actions: dict[int, str] = {}
            for episode in active:
                out = completions.get(id(episode))
                if out is None:
                    continue
                episode.builder.add_model_turn(out)
                episode.model_turns.append(out.text)
                episode.finish_reasons.append(out.finish_reason)
                episode.reused_tokens += int(out.extra.get("reused_prefix_tokens", 0))
                admissible = episode.infos[-1].get("admissible_actions") or ()
                parsed = choose_action(out.text, parser, on_unparsable, noop, admissible)
                episode.format_valid.append(parsed.format_valid)
                episode.actions.append(parsed.action)
                actions[episode.slot] = parsed.action
            results = slots.step(actions) if actions else {}
            still: list[_Episode] = []
            for episode in active:
                if episode.slot in results:
                    observation, reward, terminated, truncated, info = results[episode.slot]
                    episode.observations.append(observation)
                    episode.rewards.append(float(reward))
                    episode.infos.append(json_safe(info))
                    episode.won = episode.won or bool(info.get("won", False))
                    episode.terminated = bool(terminated)
                    if truncated:
                        episode.truncated, episode.cut_by = True, "env"
                    if not (terminated or truncated) and max_turns is not None and len(episode.actions) >= max_turns:
                        episode.truncated, episode.cut_by = True, "max_turns"
                    if not (episode.terminated or episode.truncated):
                        message = prompts.observation_message(prompt, observation, info)
                        episode.builder.add_observation(message, action=episode.actions[-1], observation=observation,
                                                        info=info)
                if episode.terminated or episode.truncated:
                    free.append(episode.slot)
                    episode.session = None  # release the KV cache
                    bar.advance(episode.won)
                else:
                    still.append(episode)
            free.sort()
            active = still
    finally:
        bar.close()
        slots.close()
    trajectories: list[Trajectory] = []
    for episode in episodes:
        trajectories.extend(_to_trajectories(episode, env_id or "", layout))
    return trajectories


def _to_trajectories(episode: _Episode, env_id: str, layout: str) -> list[Trajectory]:
    out = []
    for step, sample in enumerate(episode.builder.samples()):
        extra = {
            "layout": layout,
            "finish_reasons": list(episode.finish_reasons),
            "cut_by": episode.cut_by,
            "reused_prefix_tokens": episode.reused_tokens,
        }
        if layout == "per_step":
            extra["step"] = step
        out.append(
            Trajectory(
                token_ids=list(sample.token_ids),
                loss_mask=list(sample.loss_mask),
                logprobs=list(sample.logprobs),
                spans=list(sample.spans),
                rewards=list(episode.rewards),
                infos=list(episode.infos),
                model_turns=list(episode.model_turns),
                actions=list(episode.actions),
                observations=list(episode.observations),
                task=episode.task,
                prompt_messages=[dict(m) for m in sample.prompt_messages],
                env_id=env_id,
                task_id=int(episode.task_id if episode.task_id is not None else -1),
                seed=episode.seed,
                group_id=episode.group_id,
                success=episode.won,
                terminated=episode.terminated,
                truncated=episode.truncated,
                format_valid=list(episode.format_valid),
                extra=extra,
            )
        )
    return out


class _Progress:
    """A rich progress bar over finished episodes (silent when disabled)."""

    def __init__(self, total: int, *, enabled: bool) -> None:
        self._bar = None
        self._won = 0
        self._done = 0
        if enabled:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._bar = Progress(TextColumn("rollout"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("{task.fields[won]}"), TimeElapsedColumn())
            self._bar.start()
            self._task = self._bar.add_task("rollout", total=total, won="")

    def advance(self, won: bool) -> None:
        self._done += 1
        self._won += int(won)
        if self._bar is not None:
            self._bar.update(self._task, advance=1, won=f"success {self._won}/{self._done}")

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
