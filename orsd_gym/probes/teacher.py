"""The teacher test: does the policy act better with a rubric in its context than without it?

ORSD distils the policy *with* a rubric in its context (the teacher) into the same policy
without it (the student): the correction is the log-likelihood gap between the two. That can
only improve behaviour where the teacher plays better than the student, so every run can
measure it directly:

* **held out** (``probes.teacher.test``: ``expert`` or ``file``): after each evaluation the same
  held-out tasks are played again, with the same seeds and decoding, once with each task's own
  rubric in context (``expert``: the env's expert plan at reset restated as criteria, the
  positive control's rubric; ``file``: a person's rubric file) and once with another held-out
  task's rubric (the shuffled control). ``teacher/gain`` is success with the own rubric minus
  without, paired by task; ``teacher/gain_vs_other`` the own rubric minus another task's. Where
  the own rubric beats both, the policy reads rubrics; this is the gate a study needs before it
  can ask whether ORSD moves behaviour.
* **training** (``probes.teacher.episodes`` > 0): for every training group the algorithm gave a
  rubric (ORSD's selected, policy-written one), that many fresh episodes of the group's task
  with the rubric in context and as many without it, both sampled as the rollout samples (its
  temperature), from the group's reset seed and the same per-episode sampling seeds, so that
  the rubric is all that differs: ``teacher/train_gain`` is with minus without, paired by group.
  The group's own attempts are no baseline: ORSD shapes a group only when its outcomes are
  mixed, so their success rate is conditioned on the outcome and pulled towards 0.5 (above a
  policy's rate where it mostly fails, below it where it mostly wins), which a rubric that
  changes nothing would read as a gain or a loss.

The rubric sits where ORSD's replay puts it (``rubric_placement``, ``rubric_template``) unless
``probes.teacher`` says otherwise. Teacher episodes (both arms) are measured, never trained on,
and draw their sampling seeds from a stream of their own, so switching the test on changes no
training number.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch

from orsd_gym import configio
from orsd_gym.algos.orsd.algorithm import task_key
from orsd_gym.algos.orsd.expert_rubric import expert_bundle
from orsd_gym.algos.orsd.replay import DEFAULT_RUBRIC_TEMPLATE, insert_rubric
from orsd_gym.algos.orsd.rubrics import format_rubric
from orsd_gym.algos.orsd.sources import file_bundles, load_rubric_file
from orsd_gym.envs.base import EXPERT_ACTIONS
from orsd_gym.envs.tasks import TaskSpec
from orsd_gym.errors import ConfigError
from orsd_gym.profiling import phase
from orsd_gym.rollout.collector import PromptEdit, collect
from orsd_gym.rollout.stats import episodes_of
from orsd_gym.rollout.trajectory import Trajectory
from orsd_gym.train.callbacks import RunContext, TrainerCallback
from orsd_gym.train.seeds import EVAL, TEACHER, iteration_seed
from orsd_gym.train.stats import mean_ci

#: Criteria of an expert rubric when neither ``probes.teacher`` nor the algorithm says.
DEFAULT_MAX_CRITERIA = 4


@dataclass(frozen=True)
class RubricContext:
    """How a rubric is put into the policy's context (as ORSD's replay puts it)."""

    placement: str = "system"
    template: str = DEFAULT_RUBRIC_TEMPLATE
    max_criteria: int = DEFAULT_MAX_CRITERIA

    def insert(self, messages: list[dict[str, str]], bundle: Sequence[str] | None) -> list[dict[str, str]]:
        """``messages`` with the bundle's criteria in them (unchanged without criteria)."""
        if not bundle:
            return messages
        return insert_rubric(messages, format_rubric(list(bundle)), placement=self.placement, template=self.template)  # type: ignore[arg-type]

    def edit(self, rubric_of: Callable[[Mapping[str, Any], int], Sequence[str] | None]) -> PromptEdit:
        """A `PromptEdit` inserting ``rubric_of(reset_info, group_id)`` into every prompt."""

        def edit(messages: list[dict[str, str]], info: dict[str, Any], group_id: int) -> list[dict[str, str]]:
            return self.insert(messages, rubric_of(info, group_id))

        return edit

    def expert_rubric(self, info: Mapping[str, Any], env_id: str) -> list[str]:
        """The expert plan in a reset info of env ``env_id`` restated as criteria (none without a plan)."""
        return expert_bundle(env_id, info.get(EXPERT_ACTIONS) or [], self.max_criteria)


def rubric_context(settings: TeacherSettings, algo_settings: Any) -> RubricContext:
    """The context of the teacher test of ``settings``: its own placement and criteria count where
    set, else the algorithm's replay's (ORSD's ``rubric_placement``, ``rubric_template``,
    ``max_criteria``), else the defaults."""
    placement = settings.placement or getattr(algo_settings, "rubric_placement", "system")
    if placement not in ("system", "user"):
        raise ConfigError(
            f"the teacher test puts the rubric in the 'system' or 'user' message, not {placement!r}: "
            "set probes.teacher.placement"
        )
    return RubricContext(
        placement=placement,
        template=getattr(algo_settings, "rubric_template", DEFAULT_RUBRIC_TEMPLATE),
        max_criteria=settings.max_criteria or getattr(algo_settings, "max_criteria", DEFAULT_MAX_CRITERIA),
    )


def held_out_rubrics(
    trajectories: Sequence[Trajectory], source: str, context: RubricContext, rubric_file: str | None = None
) -> dict[str, list[str]]:
    """Task key -> that task's own rubric, for the tasks ``trajectories`` played (those with one)."""
    table = load_rubric_file(rubric_file, "probes.teacher.rubric_file") if source == "file" and rubric_file else {}
    rubrics: dict[str, list[str]] = {}
    for trajectory in episodes_of(trajectories):
        key = task_key(trajectory)
        if source == "expert":
            bundle = context.expert_rubric(trajectory.infos[0], trajectory.env_id)
        elif source == "file":
            found = file_bundles(table, key)
            bundle = found[0] if found else []
        else:
            raise ValueError(f"teacher test source must be 'expert' or 'file', got {source!r}")
        if bundle:
            rubrics[key] = bundle
    return rubrics


def other_tasks_rubrics(rubrics: Mapping[str, Sequence[str]], seed: int) -> dict[str, list[str]]:
    """Each task gets the rubric of another task: the keys in a seeded random order, each
    taking its successor's rubric (a derangement; empty with fewer than two tasks)."""
    keys = sorted(rubrics)
    if len(keys) < 2:
        return {}
    order = [keys[i] for i in np.random.default_rng(seed).permutation(len(keys))]
    return {key: list(rubrics[order[(n + 1) % len(order)]]) for n, key in enumerate(order)}


def success_by_task(trajectories: Sequence[Trajectory]) -> dict[str, float]:
    """Task key -> success rate over its episodes (one per episode, whatever the layout)."""
    return _success_by(trajectories, task_key)


def success_by_group(trajectories: Sequence[Trajectory]) -> dict[int, float]:
    """Group id -> success rate over its episodes (one per episode, whatever the layout)."""
    return _success_by(trajectories, lambda trajectory: trajectory.group_id)


def _success_by(trajectories: Sequence[Trajectory], key: Callable[[Trajectory], Any]) -> dict[Any, float]:
    wins: dict[Any, list[float]] = {}
    for trajectory in episodes_of(trajectories):
        wins.setdefault(key(trajectory), []).append(float(trajectory.success))
    return {name: float(np.mean(values)) for name, values in wins.items()}


def paired_gain(with_rubric: Mapping[str, float], without: Mapping[str, float], keys: Sequence[str]) -> dict:
    """Mean of ``with - without`` over ``keys`` with its 95% t interval (paired by task)."""
    diffs = [with_rubric[k] - without[k] for k in keys if k in with_rubric and k in without]
    estimate = mean_ci(diffs, (-1.0, 1.0))
    return {"mean": estimate.mean, "low": estimate.low, "high": estimate.high, "n": estimate.n}


def teacher_test(
    play: Callable[[PromptEdit], list[Trajectory]],
    baseline: Sequence[Trajectory],
    context: RubricContext,
    source: str,
    *,
    seed: int,
    rubric_file: str | None = None,
    broadcast: Callable[[Any], Any] = lambda value: value,
) -> tuple[dict[str, float], dict[str, Any]]:
    """Play the held-out tasks of ``baseline`` (the evaluation just made) with their own and
    with other tasks' rubrics; returns ``teacher/*`` metrics and the per-task record.

    ``play(edit)`` replays the evaluation with a prompt edit (in data-parallel runs every
    worker plays its share and the main one gets all); ``broadcast`` gives every worker the
    main worker's rubric table (the others hold no baseline)."""
    own = broadcast(held_out_rubrics(baseline, source, context, rubric_file) if baseline else None)
    other = other_tasks_rubrics(own, seed)
    with_own = play(context.edit(lambda info, _group: own.get(str(info.get("task_key")))))
    with_other = play(context.edit(lambda info, _group: other.get(str(info.get("task_key")))))
    if not baseline:
        return {}, {}
    arms = {"none": success_by_task(baseline), "own": success_by_task(with_own), "other": success_by_task(with_other)}
    keys = sorted(own)
    gain, versus = paired_gain(arms["own"], arms["none"], keys), paired_gain(arms["own"], arms["other"], keys)
    metrics = {
        "teacher/tasks_with_rubric": float(len(keys)),
        **{f"teacher/success_{arm}": _mean_over(values, keys) for arm, values in arms.items()},
        **{f"teacher/gain{suffix}": gain[part] for part, suffix in (("mean", ""), ("low", "_low"), ("high", "_high"))},
        **{
            f"teacher/gain_vs_other{suffix}": versus[part]
            for part, suffix in (("mean", ""), ("low", "_low"), ("high", "_high"))
        },
    }
    record = {"source": source, "placement": context.placement, "rubrics": own, "lent": other, "success": arms}
    return metrics, record


def _mean_over(values: Mapping[str, float], keys: Sequence[str]) -> float:
    present = [values[k] for k in keys if k in values]
    return float(np.mean(present)) if present else float("nan")


def training_teacher_pairs(
    play: Callable[[list[Trajectory], PromptEdit | None], list[Trajectory]],
    trajectories: Sequence[Trajectory],
    audit: Sequence[Mapping[str, Any]],
    context: RubricContext,
) -> list[dict[str, Any]]:
    """For each audited group with a selected rubric: the success of fresh episodes of its task
    with the rubric in context and of fresh episodes without it (never of the group's own
    attempts, see the module docstring). ``play(firsts, edit)`` plays one group per trajectory of
    ``firsts`` (its task and reset seed) with the same sampling seeds on every call, ``edit``
    giving group ``n`` rubric ``n`` (None: no rubric)."""
    shaped = [g for g in audit if g.get("selected_rubric")]
    if not shaped:
        return []
    firsts = [trajectories[g["attempt_indices"][0]] for g in shaped]
    rubrics = [list(g["selected_rubric"]) for g in shaped]
    with_rubric = success_by_group(play(firsts, context.edit(lambda _info, group: rubrics[group])))
    without = success_by_group(play(firsts, None))
    nan = float("nan")
    return [
        {"task_key": group.get("task_key"), "with": with_rubric.get(n, nan), "without": without.get(n, nan)}
        for n, group in enumerate(shaped)
    ]


def training_teacher_metrics(pairs: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """``teacher/train_gain`` (with minus without, paired by group) with its interval, and
    each arm's success rate over the same groups."""
    played = [p for p in pairs if not (np.isnan(p["with"]) or np.isnan(p["without"]))]
    if not played:
        return {}
    estimate = mean_ci([p["with"] - p["without"] for p in played], (-1.0, 1.0))
    return {
        "teacher/train_groups": float(len(played)),
        "teacher/train_success_with": float(np.mean([p["with"] for p in played])),
        "teacher/train_success_without": float(np.mean([p["without"] for p in played])),
        "teacher/train_gain": estimate.mean,
        "teacher/train_gain_low": estimate.low,
        "teacher/train_gain_high": estimate.high,
    }


def teacher_episodes(envs: Any, policy: Any, config: Any, episodes: int, seed: int) -> Callable[..., list[Trajectory]]:
    """``play(firsts, edit)``: ``episodes`` sampled episodes of each group's task
    (given by its first attempt: task and reset seed) with the prompt edit (None: without),
    played like the group's own attempts (the rollout's temperature); never trained on.

    Every call samples from ``seed`` (the teacher's stream), so episode ``k`` of group ``n``
    draws the same random numbers with and without the rubric: the arms differ by the rubric
    alone, and their difference varies less than two independent draws would."""

    def play(firsts: Sequence[Trajectory], edit: PromptEdit | None) -> list[Trajectory]:
        with torch.no_grad():
            return collect(
                envs,
                policy,
                [TaskSpec(t.seed, t.task_id if t.task_id >= 0 else None) for t in firsts],
                group_size=episodes,
                sampling=config.rollout.sampling(config.rollout.temperature, seed),
                options=config.rollout,
                edit_prompt=edit,
            )

    return play


@dataclass
class TeacherSettings:
    """``probes.teacher``: the teacher test on held-out tasks and on training groups."""

    #: After each evaluation, the held-out tasks played again with each task's own rubric in
    #: context and with another task's. "expert": the env's expert plan restated (the eval
    #: side's env needs ``expert``, e.g. ``eval.env_kwargs.expert=reset``); "file":
    #: ``rubric_file`` (task key or "*" -> criteria, as ORSD's rubric_file).
    test: Literal["off", "expert", "file"] = "off"
    #: The rubric file of ``test: file`` (YAML: task key or "*" -> list of criteria).
    rubric_file: str | None = None
    #: Where the rubric goes (None: as the algorithm's replay does, ORSD's rubric_placement;
    #: else system).
    placement: Literal["system", "user"] | None = None
    #: Criteria an expert rubric keeps in the teacher test (None: the algorithm's max_criteria, else 4).
    max_criteria: int | None = None
    #: Per training group the algorithm gave a rubric, this many fresh episodes of its task with
    #: the rubric in context and as many without, from the same seeds, paired by group
    #: (``teacher/train_gain``; 0: off; measured, never trained on).
    episodes: int = 0

    def __post_init__(self) -> None:
        if (self.test == "file") != (self.rubric_file is not None):
            raise ValueError("rubric_file is needed by test='file' and used by it only")
        if self.episodes < 0:
            raise ValueError(f"episodes must be >= 0, got {self.episodes}")
        if self.max_criteria is not None and self.max_criteria < 1:
            raise ValueError(f"max_criteria must be >= 1, got {self.max_criteria}")


class TeacherProbe(TrainerCallback):
    """The teacher test after each evaluation (``teacher/*`` in ``eval.jsonl``, the per-task
    record in ``teacher.jsonl``) and the training teacher pairs after each `prepare`."""

    section = "teacher"
    Settings = TeacherSettings
    safe_changes = frozenset({"test", "rubric_file", "placement", "max_criteria"})
    settings: TeacherSettings

    def check_config(self, config: Any, algo_settings: Any) -> None:
        """The teacher test's rubrics must exist: the expert's plan on the evaluation side, a
        readable rubric file, a placement it can use."""
        test = self.settings
        if test.test == "off" and test.episodes == 0:
            return
        rubric_context(test, algo_settings)
        if test.test == "expert" and not configio.merge(config.env.kwargs, config.eval.env_kwargs).get("expert"):
            raise ConfigError(
                "probes.teacher.test=expert restates the env's expert plan at reset: set eval.env_kwargs.expert=reset"
            )
        if test.rubric_file is not None:
            load_rubric_file(test.rubric_file, "probes.teacher.rubric_file")

    def after_prepare(self, run: RunContext, batch: Any, iteration: int) -> dict[str, float]:
        """Fresh episodes of each shaped group's task with its rubric in context and without it,
        paired by group (each worker its own groups; worker 0 gets the metrics)."""
        if self.settings.episodes == 0:
            return {}
        config = run.config
        seed = iteration_seed(config.train.seed, iteration, TEACHER)
        play = teacher_episodes(run.training_envs(), run.policy, config, self.settings.episodes, seed)
        with phase("teacher"):
            context = rubric_context(self.settings, run.algo_settings)
            pairs = training_teacher_pairs(play, batch.trajectories, batch.audit, context)
        everyone = run.workers.gather(pairs)
        return training_teacher_metrics([p for part in everyone for p in part]) if everyone is not None else {}

    def after_evaluation(
        self, run: RunContext, baseline: Sequence[Trajectory], iteration: int
    ) -> tuple[dict[str, float], dict[str, Any]]:
        """The held-out tasks replayed with their own and other tasks' rubrics."""
        if self.settings.test == "off":
            return {}, {}
        seed = iteration_seed(run.config.train.seed, iteration, EVAL)
        with phase("teacher"):
            return teacher_test(
                lambda edit: run.evaluate(seed, edit),
                baseline,
                rubric_context(self.settings, run.algo_settings),
                self.settings.test,
                seed=iteration_seed(run.config.train.seed, iteration, TEACHER),
                rubric_file=self.settings.rubric_file,
                broadcast=lambda value: run.workers.all_gather(value)[0],
            )
