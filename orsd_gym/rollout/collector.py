"""`collect`: play G attempts at each task with a policy and return token-level Trajectories.

A *task* is an ``int`` (a reset seed: the env picks the task from it, as in training) or a
`TaskSpec` naming ``task_id`` explicitly (plus a seed for the env's own randomness). The G
episodes of a task reset with the same seed and options (a GRPO group, ``group_id`` = the task's
index in ``tasks`` plus ``first_group``) and differ only by sampling noise.

A rollout runs in rounds, each three phases you can read on their own (`_Rollout`):

1. admit   start pending episodes on free env slots;
2. generate  one batched `Policy.generate` call per distinct per-turn token limit for all active
           episodes (each keeps a generation session, so a turn encodes only the tokens added
           since its previous turn);
3. step    parse each turn into an action, step the envs together, record what they said and
           retire finished episodes.

Each episode samples from its own stream, seeded by ``seed``, its ``episode_id`` and the turn,
so what an episode plays depends on its task and the weights alone, not on which episodes share
its generation batch: on how many env slots there are, or how a data-parallel run splits the
groups among its workers (a worker playing groups k.. passes ``first_group=k``).

Budgets (`RolloutOptions.max_turns`, `SamplingParams.max_new_tokens` per turn and
`RolloutOptions.max_episode_tokens` per sample) end an episode with ``truncated=True``; it is
returned, never dropped. An observation never takes the room of the model's next turn: one too
long for it is cut, with a marker the model reads (`orsd_gym.rollout.fit`).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import gymnasium as gym
import numpy as np
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from orsd_gym import progress
from orsd_gym.envs.presentation import templates_for
from orsd_gym.envs.tasks import TaskSpec, as_task_spec
from orsd_gym.errors import ConfigError, EnvContractError
from orsd_gym.jsonio import json_safe
from orsd_gym.policies.base import Completion, Policy, SamplingParams
from orsd_gym.rollout import prompts
from orsd_gym.rollout.actions import choose_action, get_parser
from orsd_gym.rollout.contract import EnvCallFailed, broken, contract_problem
from orsd_gym.rollout.envpool import EnvSlots, SlotPool
from orsd_gym.rollout.episode import MessageEdit, PerStepEpisode, SequenceEpisode
from orsd_gym.rollout.fit import fit_observation, reserved_turn
from orsd_gym.rollout.options import RolloutOptions
from orsd_gym.rollout.trajectory import EpisodeRecord, Trajectory
from orsd_gym.wrappers.templates import fill_templates

#: Env slots played side by side when ``num_envs`` is not given (at most one per episode).
DEFAULT_NUM_ENVS = 16

#: Rewrites an episode's prompt messages before they are rendered: called with the messages, the
#: episode's reset info and its ``group_id``; returns the messages to use (e.g. with a rubric
#: inserted, `orsd_gym.probes.teacher`). Applied to every sample's prompt in the per-step layout.
PromptEdit = Callable[[list[dict[str, str]], dict[str, Any], int], list[dict[str, str]]]

#: Where `collect` makes the envs of an env id: in this process, or in Ray actors
#: (`orsd_gym.rollout.ray_envs`).
EnvBackend = Literal["local", "ray"]


@dataclass(kw_only=True)
class _Episode(EpisodeRecord):
    """An episode being played: its record, and what playing it takes."""

    #: The task asked for at reset (None: the env draws one); the record's ``task_id`` is the
    #: one the env reports.
    requested_task_id: int | None = None
    slot: int = -1
    builder: Any = None
    session: Any = None
    finish_reasons: list[str] = field(default_factory=list)
    cut_by: str = ""
    reused_tokens: int = 0
    #: Times the episode's env was lost and the episode replayed on a new one (remote envs).
    env_replays: int = 0
    #: Observations cut to leave the model's turn its room (`orsd_gym.rollout.fit`).
    observations_cut: int = 0


def expert_teacher(info: dict[str, Any]) -> str:
    """The first action of the env's expert plan (``info["expert_actions"]``, e.g. ALFWorld's planner)."""
    plan = info.get("expert_actions") or []
    if not plan:
        raise ValueError("expert_teacher needs info['expert_actions']: make the env with expert=True")
    return str(plan[0])


def _turn_seed(seed: int, episode_id: int, turn: int) -> int:
    """The sampling seed of one model turn of one episode."""
    return int(np.random.SeedSequence([seed, episode_id, turn]).generate_state(1)[0])


def collect(
    env: str | gym.Env | gym.vector.VectorEnv | list[gym.Env] | SlotPool,
    policy: Policy,
    tasks: Sequence[int | TaskSpec],
    *,
    group_size: int = 4,
    sampling: SamplingParams | None = None,
    options: RolloutOptions | None = None,
    seed: int = 0,
    num_envs: int | None = None,
    env_kwargs: dict[str, Any] | None = None,
    env_prompt: prompts.EnvPrompt | None = None,
    teacher: Callable[[dict[str, Any]], str] | None = None,
    progress: bool = False,
    env_backend: EnvBackend = "local",
    first_group: int = 0,
    edit_prompt: PromptEdit | None = None,
) -> list[Trajectory]:
    """Roll out ``group_size`` episodes per task; see the module docstring.

    ``env`` is an env id (``num_envs`` copies are made with ``env_kwargs`` and closed here: in
    this process, or with ``env_backend="ray"`` in Ray actors), a `gymnasium.Env` (copies are
    made from its spec), a list of envs, a `VectorEnv` or a `SlotPool` such as
    `orsd_gym.rollout.ray_envs.RayEnvSlots` (used as is, one slot per env). Episodes whose
    remote env was lost and replayed say how often in ``extra["env_replays"]``.
    ``first_group`` numbers the groups (and so the episodes and their sampling streams) from
    there. In the per-step layout each step is its own Trajectory (``step`` =
    0, 1, ...; all share the episode's ``episode_id``) and repeats the episode's rewards,
    actions and observations.

    ``teacher`` (e.g. `expert_teacher` on an env made with ``expert=True``) replaces sampling:
    each model turn is the teacher's action for the latest info, tokenised and closed with the
    end-of-turn token, in exactly the layout a sampled turn would have (demonstrations for
    behaviour cloning; their log-probs are 0).

    ``edit_prompt`` (a `PromptEdit`) changes what the policy is shown, e.g. a rubric in its
    context; episodes whose prompt it changed say so in ``extra["privileged_prompt"]``.
    """
    if group_size < 1:
        raise ValueError(f"group_size must be >= 1, got {group_size}")
    if first_group < 0:
        raise ValueError(f"first_group must be >= 0, got {first_group}")
    options = options or RolloutOptions()
    specs = [as_task_spec(t) for t in tasks]
    episodes = [
        _Episode(episode_id=g * group_size + k, group_id=g, seed=spec.seed, requested_task_id=spec.task_id)
        for g, spec in enumerate(specs, start=first_group)
        for k in range(group_size)
    ]
    if not episodes:
        return []
    slots = _slots(env, min(num_envs or DEFAULT_NUM_ENVS, len(episodes)), env_kwargs, env_backend)
    bar = _Progress(len(episodes), enabled=progress)
    try:
        rollout = _Rollout(slots, policy, sampling or SamplingParams(), options, env_prompt, teacher, seed, edit_prompt)
        pending = list(episodes)
        while pending or rollout.active:
            rollout.admit(pending)
            rollout.generate_round()
            for episode in rollout.step_round():
                bar.advance(episode.success)
            bar.round_done()
    finally:
        bar.close()
        if slots is not env:  # the caller's own pool stays open
            slots.close()
    temperature = rollout.sampling.temperature
    return [t for episode in episodes for t in _to_trajectories(episode, slots, options.layout, temperature)]


def _slots(env: Any, n: int, env_kwargs: dict[str, Any] | None, backend: EnvBackend) -> SlotPool:
    """The slot pool ``collect`` plays on (the caller's own, or one made here)."""
    if backend not in ("local", "ray"):
        raise ValueError(f"env_backend={backend!r}; choose 'local' or 'ray'")
    if isinstance(env, SlotPool):
        return env
    if backend == "ray":
        if not isinstance(env, str):
            raise TypeError('env_backend="ray" makes the envs in Ray actors: pass an env id, or a RayEnvSlots')
        from orsd_gym.rollout.ray_envs import RayEnvSlots

        return RayEnvSlots(env, n, env_kwargs)
    return EnvSlots(env, n, env_kwargs)


class _Rollout:
    """The state of one `collect` call between rounds, and its three phases."""

    def __init__(
        self,
        slots: SlotPool,
        policy: Policy,
        sampling: SamplingParams,
        options: RolloutOptions,
        env_prompt: prompts.EnvPrompt | None,
        teacher: Callable[[dict[str, Any]], str] | None,
        seed: int,
        edit_prompt: PromptEdit | None = None,
    ) -> None:
        self.slots = slots
        self.edit_prompt = edit_prompt
        self.policy = policy
        self.sampling = sampling
        self.options = options
        self.teacher = teacher
        self.seed = seed
        self.parser = get_parser(options.action_format)
        self.stop = tuple(dict.fromkeys((*sampling.stop, *self.parser.stop)))
        self.token_budget = min(options.max_episode_tokens, policy.max_positions)
        self.reserve = reserved_turn(sampling.max_new_tokens, self.token_budget)
        prompt = env_prompt or prompts.prompt_for(slots.env_id)
        if self.parser.numbered_choices:
            # The format asks the model to choose from the list: show it, whatever the env's default.
            prompt = dataclasses.replace(prompt, numbered=True, show_admissible=True)
        self.prompt = prompt
        # A model that chooses from the list needs concrete actions where the env lists a
        # template (WebShop's search[<your query>]): the env says how to fill them.
        self.templates = templates_for(slots.env_id) if self.parser.numbered_choices else {}
        self.noop = prompt.noop_action if options.noop_action is None else options.noop_action
        self.system = prompts.system_prompt(prompt, self.parser.format_instructions)
        self.active: list[_Episode] = []
        self.free = list(range(slots.n))

    # ------------------------------------------------------------------ 1. admit
    def admit(self, pending: list[_Episode]) -> None:
        """Start pending episodes (in order) on free slots, their resets sent together."""
        starting = []
        while pending and self.free:
            episode = pending.pop(0)
            episode.slot = self.free.pop(0)
            starting.append(episode)
        self.active.extend(starting)
        try:
            replies = self.slots.reset_many(
                {
                    e.slot: (e.seed, {} if e.requested_task_id is None else {"task_id": e.requested_task_id})
                    for e in starting
                }
            )
        except EnvCallFailed as failure:
            raise self._failed(failure, None) from failure.error
        for episode in starting:
            self._start(episode, *replies[episode.slot])

    def _start(self, episode: _Episode, observation: str, info: dict[str, Any]) -> None:
        self._check(episode, None, observation, info)
        info = fill_templates(info, self.templates)
        if self.parser.numbered_choices and self.teacher is None and not info.get("admissible_actions"):
            raise ConfigError(
                f"action_format={self.parser.name!r} asks the model to choose from the env's admissible actions, "
                f"but {self.slots.env_id or 'the env'} lists none at reset (info['admissible_actions']); "
                "use action_format='last_line' or 'tag'"
            )
        episode.task = str(info.get("task", ""))
        requested = episode.requested_task_id
        episode.task_id = int(info.get("task_id", requested if requested is not None else -1))
        episode.env_id = self.slots.env_id or ""
        episode.infos.append(json_safe(info))
        edit = None
        if self.edit_prompt is not None:
            edit = functools.partial(_edited, self.edit_prompt, info=episode.infos[0], group_id=episode.group_id)
        observation = self._fitted(
            episode, observation, lambda text: len(self._builder(episode, text, info, edit).context())
        )
        episode.observations.append(observation)
        episode.builder = self._builder(episode, observation, info, edit)
        if self.options.kv_cache:
            episode.session = self.policy.new_session()

    def _builder(
        self, episode: _Episode, observation: str, info: dict[str, Any], edit: MessageEdit | None
    ) -> SequenceEpisode | PerStepEpisode:
        """The episode's samples as they start: the prompt with its first observation."""
        first = prompts.first_message(self.prompt, observation, info)
        if self.options.layout == "sequence":
            messages = [{"role": "system", "content": self.system}, {"role": "user", "content": first}]
            return SequenceEpisode(self.policy.chat, messages, edit)

        def render(recent, obs, inf, task=episode.task):
            return prompts.per_step_message(self.prompt, task, recent, obs, inf)

        return PerStepEpisode(self.policy.chat, self.system, first, render, self.options.history, observation, edit)

    def _fitted(self, episode: _Episode, observation: str, context_after: Callable[[str], int]) -> str:
        """The observation as the model is shown it (`orsd_gym.rollout.fit`), given the context's
        length were it shown as ``text``; a cut is recorded in the step's info and counted."""
        shown, kept = fit_observation(
            observation, lambda text: self.token_budget - context_after(text), self.reserve, self.token_budget
        )
        if kept is not None:
            episode.infos[-1]["observation_cut"] = {"shown_chars": kept, "total_chars": len(observation)}
            episode.observations_cut += 1
        return shown

    # ------------------------------------------------------------------ 2. generate
    def generate_round(self) -> None:
        """One model turn for every active episode that still has token budget."""
        by_limit: dict[int, list[_Episode]] = {}
        for episode in self.active:
            room = int(self.token_budget - len(episode.builder.context()))
            if room < 1:
                episode.truncated, episode.cut_by = True, "max_episode_tokens"
                if isinstance(episode.builder, SequenceEpisode):
                    # The model never answers the last observation: keep the sample within budget.
                    episode.builder.drop_trailing_observation()
                continue
            by_limit.setdefault(min(self.sampling.max_new_tokens, room), []).append(episode)
        for limit, batch in sorted(by_limit.items()):
            for episode, completion in zip(batch, self._complete(batch, limit), strict=True):
                episode.builder.add_model_turn(completion)
                episode.model_turns.append(completion.text)
                episode.finish_reasons.append(completion.finish_reason)
                episode.reused_tokens += int(completion.extra.get("reused_prefix_tokens", 0))

    def _complete(self, batch: list[_Episode], limit: int) -> list[Completion]:
        if self.teacher is not None:
            return [self._teacher_turn(self.teacher(e.infos[-1])) for e in batch]
        params = SamplingParams(limit, self.sampling.temperature, self.sampling.top_p, self.stop)
        sessions = [e.session for e in batch] if self.options.kv_cache else None
        seeds = [_turn_seed(self.seed, e.episode_id, len(e.model_turns)) for e in batch]
        return self.policy.generate([e.builder.context() for e in batch], params, sessions=sessions, seeds=seeds)

    def _teacher_turn(self, text: str) -> Completion:
        tokens = self.policy.chat.end_of_turn_tokens(text)
        ended = self.policy.tokenizer.eos_token_id is not None
        return Completion(tokens, [0.0] * len(tokens), text, "eos" if ended else "length")

    def _check(self, episode: _Episode, action: str | None, observation: Any, info: Any, reward: Any = 0.0) -> None:
        """Any env's reply, a plain `gymnasium.Env`'s too, meets the text-env contract."""
        problem = contract_problem(observation, info, reward)
        if problem is not None:
            raise broken(self.slots.env_id, episode.seed, episode.requested_task_id, action, problem)

    def _failed(self, failure: EnvCallFailed, action_of: dict[int, str] | None) -> EnvContractError:
        """The contract error of the episode whose env raised (``action_of``: each slot's action)."""
        episode = next(e for e in self.active if e.slot == failure.slot)
        action = None if action_of is None else action_of[failure.slot]
        error = failure.error
        return broken(
            self.slots.env_id,
            episode.seed,
            episode.requested_task_id,
            action,
            f"raised {type(error).__name__}: {error}",
        )

    # ------------------------------------------------------------------ 3. step
    def step_round(self) -> list[_Episode]:
        """Send this round's actions, record the envs' replies; returns the episodes that finished."""
        actions: dict[int, str] = {}
        for episode in self.active:
            if len(episode.model_turns) == len(episode.actions):
                continue  # cut by the token budget this round: no new turn to act on
            admissible = episode.infos[-1].get("admissible_actions") or ()
            parsed = choose_action(
                episode.model_turns[-1], self.parser, self.options.on_unparsable, self.noop, admissible
            )
            episode.format_valid.append(parsed.format_valid)
            episode.actions.append(parsed.action)
            actions[episode.slot] = parsed.action
        try:
            results = self.slots.step(actions) if actions else {}
        except EnvCallFailed as failure:
            raise self._failed(failure, actions) from failure.error
        finished, still = [], []
        for episode in self.active:
            if episode.slot in results:
                self._record(episode, *results[episode.slot])
            if episode.finished:
                episode.env_replays = self.slots.replays(episode.slot)
                self.free.append(episode.slot)
                episode.session = None  # release the generation session (the KV cache)
                finished.append(episode)
            else:
                still.append(episode)
        self.free.sort()
        self.active = still
        return finished

    def _record(
        self,
        episode: _Episode,
        observation: str,
        reward: float,
        terminated: bool,
        truncated: bool,
        info: dict[str, Any],
    ) -> None:
        self._check(episode, episode.actions[-1], observation, info, reward)
        info = fill_templates(info, self.templates)
        episode.rewards.append(float(reward))
        episode.infos.append(json_safe(info))
        episode.success = episode.success or bool(info.get("won", False))
        episode.terminated = bool(terminated)
        if truncated:
            episode.truncated, episode.cut_by = True, "env"
        max_turns = self.options.max_turns
        if not episode.finished and max_turns is not None and len(episode.actions) >= max_turns:
            episode.truncated, episode.cut_by = True, "max_turns"
        if episode.finished:  # what the env said last: no model turn answers it
            episode.observations.append(observation)
            return
        action = episode.actions[-1]

        def context_after(text: str) -> int:
            message = prompts.observation_message(self.prompt, text, info)
            return episode.builder.context_after(message, action=action, observation=text, info=info)

        observation = self._fitted(episode, observation, context_after)
        episode.observations.append(observation)
        message = prompts.observation_message(self.prompt, observation, info)
        episode.observation_messages.append(message)
        episode.builder.add_observation(message, action=action, observation=observation, info=info)


def _edited(
    edit: PromptEdit, messages: list[dict[str, str]], *, info: dict[str, Any], group_id: int
) -> list[dict[str, str]]:
    return edit([dict(m) for m in messages], info, group_id)


def _to_trajectories(episode: _Episode, slots: SlotPool, layout: str, temperature: float) -> list[Trajectory]:
    out = []
    for step, sample in enumerate(episode.builder.samples()):
        extra = {
            "layout": layout,
            "finish_reasons": list(episode.finish_reasons),
            "cut_by": episode.cut_by,
            "reused_prefix_tokens": episode.reused_tokens,
            "observations_cut": episode.observations_cut,
        }
        if slots.remote:
            extra["env_replays"] = episode.env_replays
        if episode.builder.edited:
            extra["privileged_prompt"] = True
        out.append(
            Trajectory.of_episode(
                episode,
                token_ids=list(sample.token_ids),
                loss_mask=list(sample.loss_mask),
                logprobs=list(sample.logprobs),
                spans=list(sample.spans),
                temperature=temperature,
                prompt_messages=[dict(m) for m in sample.prompt_messages],
                step=step if layout == "per_step" else None,
                # Per-step samples each show their own observation, not the episode's messages.
                observation_messages=list(episode.observation_messages) if layout == "sequence" else [],
                extra=extra,
            )
        )
    return out


class _Progress:
    """A rich progress bar over finished episodes (silent when disabled), and a note of them
    for the command's progress lines (`orsd_gym.progress`)."""

    def __init__(self, total: int, *, enabled: bool) -> None:
        self._bar = None
        self._won = 0
        self._done = 0
        self._total = total
        self._rounds = 0
        if enabled:
            self._bar = Progress(
                TextColumn("rollout"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[won]}"),
                TimeElapsedColumn(),
            )
            self._bar.start()
            self._task = self._bar.add_task("rollout", total=total, won="")

    def advance(self, won: bool) -> None:
        self._done += 1
        self._won += int(won)
        if self._bar is not None:
            self._bar.update(self._task, advance=1, won=f"success {self._won}/{self._done}")

    def round_done(self) -> None:
        """One more turn played by every active episode (a model turn can take minutes on a CPU)."""
        self._rounds += 1
        progress.note(f"{self._done}/{self._total} episodes played ({self._won} won) after {self._rounds} turn(s)")

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
