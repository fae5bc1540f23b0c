"""`collect`: play G attempts at each task with a policy and return token-level Trajectories.

A *task* is an ``int`` (a reset seed: the env picks the task from it, as in training) or a
`TaskSpec` naming ``task_id`` explicitly (plus a seed for the env's own randomness). The G
episodes of a task reset with the same seed and options (a GRPO group, ``group_id`` = the task's
index in ``tasks`` plus ``first_group``) and differ only by sampling noise.

A rollout runs in rounds, each three phases you can read on their own
(`orsd_gym.rollout.rounds.Rounds`):

1. admit   start pending episodes on free env slots;
2. generate  one batched `Policy.generate` call per distinct per-turn token limit for all active
           episodes (each keeps a generation session, so a turn encodes only the tokens added
           since its previous turn);
3. step    parse each turn into an action, step the envs together, record what they said and
           retire finished episodes.

Each episode samples from its own stream, seeded by the sampling's ``seed`` (None: 0), its
``episode_id`` and the turn, so what an episode plays depends on its task and the weights alone,
not on which episodes share its generation batch: on how many env slots there are, or how a
data-parallel run splits the groups among its workers (a worker playing groups k.. passes
``first_group=k``).

Budgets (`RolloutOptions.max_turns`, `SamplingParams.max_new_tokens` per turn and
`RolloutOptions.max_episode_tokens` per sample) end an episode with ``truncated=True``; it is
returned, never dropped. An observation never takes the room of the model's next turn: one too
long for it is cut, with a marker the model reads (`orsd_gym.rollout.fit`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from orsd_gym.envs.tasks import TaskSpec, as_task_spec
from orsd_gym.policies.base import Policy, SamplingParams
from orsd_gym.rollout.env_setup import Envs, EnvSetup
from orsd_gym.rollout.episode import PromptEdit
from orsd_gym.rollout.options import RolloutOptions
from orsd_gym.rollout.progress_bar import EpisodeProgress
from orsd_gym.rollout.rounds import LiveEpisode, Rounds, to_trajectories
from orsd_gym.rollout.trajectory import Trajectory

__all__ = ["EnvSetup", "PromptEdit", "TaskSpec", "Teacher", "collect", "expert_teacher"]


@dataclass(frozen=True)
class Teacher:
    """Plays every model turn with ``act(info)`` (the latest step's info) instead of sampling:
    the action is tokenised with ``policy``'s chat template and closed with its end-of-turn
    token, in exactly the layout a sampled turn would have (demonstrations for behaviour
    cloning; their log-probs are 0)."""

    policy: Policy
    act: Callable[[dict[str, Any]], str]


def expert_teacher(info: dict[str, Any]) -> str:
    """The first action of the env's expert plan (``info["expert_actions"]``, e.g. ALFWorld's planner)."""
    plan = info.get("expert_actions") or []
    if not plan:
        raise ValueError("expert_teacher needs info['expert_actions']: make the env with expert=True")
    return str(plan[0])


def collect(
    env: Envs | EnvSetup,
    policy: Policy | Teacher,
    tasks: Sequence[int | TaskSpec],
    *,
    group_size: int = 4,
    sampling: SamplingParams | None = None,
    options: RolloutOptions | None = None,
    first_group: int = 0,
    edit_prompt: PromptEdit | None = None,
) -> list[Trajectory]:
    """Roll out ``group_size`` episodes per task; see the module docstring.

    ``env`` is an env id, envs of your own or a slot pool, or an `EnvSetup` around one (with
    ``gym.make`` keywords, ``num_envs``, ``backend="ray"``, the env's prompt, a progress bar).
    Episodes whose remote env was lost and replayed say how often in ``extra["env_replays"]``.
    ``sampling.seed`` (None: 0) seeds every episode's sampling stream; ``first_group`` numbers
    the groups (and so the episodes and their streams) from there. In the per-step layout each
    step is its own Trajectory (``step`` = 0, 1, ...; all share the episode's ``episode_id``)
    and repeats the episode's rewards, actions and observations.

    ``policy`` may be a `Teacher` (e.g. ``Teacher(policy, expert_teacher)`` on an env made with
    ``expert=True``): it plays the turns instead of sampling.

    ``edit_prompt`` (a `PromptEdit`) changes what the policy is shown, e.g. a rubric in its
    context; episodes whose prompt it changed say so in ``extra["privileged_prompt"]``.
    """
    if group_size < 1:
        raise ValueError(f"group_size must be >= 1, got {group_size}")
    if first_group < 0:
        raise ValueError(f"first_group must be >= 0, got {first_group}")
    setup = env if isinstance(env, EnvSetup) else EnvSetup(env)
    options = options or RolloutOptions()
    sampling = sampling or SamplingParams()
    specs = [as_task_spec(t) for t in tasks]
    episodes = [
        LiveEpisode(episode_id=g * group_size + k, group_id=g, seed=spec.seed, requested_task_id=spec.task_id)
        for g, spec in enumerate(specs, start=first_group)
        for k in range(group_size)
    ]
    if not episodes:
        return []
    slots = setup.slots(len(episodes))
    bar = EpisodeProgress(len(episodes), enabled=setup.progress)
    model, teacher = (policy.policy, policy.act) if isinstance(policy, Teacher) else (policy, None)
    try:
        rounds = Rounds(slots, model, sampling, options, setup.prompt, teacher, edit_prompt)
        pending = list(episodes)
        while pending or rounds.active:
            rounds.admit(pending)
            rounds.generate_round()
            for episode in rounds.step_round():
                bar.advance(episode.success)
            bar.round_done()
    finally:
        bar.close()
        if setup.owns(slots):
            slots.close()
    return [t for episode in episodes for t in to_trajectories(episode, slots, options.layout, sampling.temperature)]
