"""Where ORSD's candidate rubrics come from (``rubric_source``), for the method and its controls.

* ``policy``: the method: the current policy writes ``num_bundles`` bundles from the group's
  attempts; verification and selection by alignment with the rewards pick one (or none).
* ``expert``: the positive control: one bundle restating the env's expert plan at the task's
  start (`orsd_gym.algos.orsd.expert_rubric`), known to be right; it uses privileged
  information no real run has. No proposal; it is verified (for the record) and applied to
  every group with mixed rewards.
* ``shuffled``: the negative control: the bundle the ``shuffled_from`` source gives a
  *different* task (another group of the batch, or one seen earlier), applied like the expert
  bundle, so any effect that remains is not about the rubric's content.
* ``file``: rubrics written by a person: ``rubric_file`` maps task keys (``info["task_key"]``,
  the keys of a run's ``task_plan.json``) or ``"*"`` to a list of criteria (one bundle) or a
  list of such lists; they go through verification and selection like proposed bundles.

Each is a `Source` whose methods hold what differs between them: what it draws of the batch's
generator first, how it proposes, and how a group's rubric is settled (the shuffled control
lends after its own selection, then judges again).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import yaml

from orsd_gym.algos.orsd.expert_rubric import expert_bundle_for
from orsd_gym.algos.orsd.groups import BatchView, Candidates, Group, Judged
from orsd_gym.algos.orsd.judge import Judge, Scores
from orsd_gym.errors import ConfigError

if TYPE_CHECKING:
    from orsd_gym.algos.orsd.config import ORSDConfig
    from orsd_gym.algos.orsd.proposer import Proposer
#: Distinct tasks whose rubric a shuffled source remembers (oldest forgotten first).
SHUFFLE_POOL_SIZE = 64


def load_rubric_file(path: str | Path, setting: str = "algo.per_algo.orsd.rubric_file") -> dict[str, list[list[str]]]:
    """``task key or "*" -> bundles`` from a YAML file; `ConfigError` naming what is wrong and
    the ``setting`` that named the file."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{setting}: {str(path)!r} does not exist")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as error:
        raise ConfigError(f"{setting}: {path} is not valid YAML: {error}") from error
    if not isinstance(raw, Mapping) or not raw:
        raise ConfigError(f"{setting}: {path} must map task keys (or '*') to lists of criteria")
    table: dict[str, list[list[str]]] = {}
    for key, value in raw.items():
        bundles = value if isinstance(value, list) and value and all(isinstance(v, list) for v in value) else [value]
        if not all(isinstance(b, list) and b and all(isinstance(c, str) and c.strip() for c in b) for b in bundles):
            raise ConfigError(
                f"{setting}: entry {key!r} of {path} must be a list of criteria (strings) or a list of such lists"
            )
        table[str(key)] = [[c.strip() for c in b] for b in bundles]
    return table


def file_bundles(table: Mapping[str, list[list[str]]], task_key: str) -> list[list[str]]:
    """The bundles a rubric file gives a task: its own entry, else the ``"*"`` entry, else none."""
    return [list(b) for b in table.get(task_key, table.get("*", []))]


class ShuffledRubrics:
    """A pool of rubrics by task key, lending each task a rubric written for another one."""

    def __init__(self, pool: Mapping[str, list[str]] | None = None) -> None:
        self.pool: dict[str, list[str]] = {k: list(v) for k, v in (pool or {}).items()}

    def remember(self, task_key: str, bundle: list[str]) -> None:
        self.pool.pop(task_key, None)
        self.pool[task_key] = list(bundle)
        while len(self.pool) > SHUFFLE_POOL_SIZE:
            self.pool.pop(next(iter(self.pool)))

    def lend(self, task_key: str, rng: np.random.Generator) -> tuple[str, list[str]] | None:
        """(key, bundle) of a random other task, or None while the pool knows no other task."""
        others = sorted(k for k in self.pool if k != task_key)
        if not others:
            return None
        key = others[int(rng.integers(len(others)))]
        return key, list(self.pool[key])

    def state(self) -> dict[str, Any]:
        return {k: list(v) for k, v in self.pool.items()}


class Source(ABC):
    """Where a group's candidate bundles come from; by default they are judged like proposals."""

    def draw(self, rng: np.random.Generator) -> int:
        """What the source draws of the batch's generator before anything else does (none)."""
        return 0

    @abstractmethod
    def propose(self, groups: Sequence[Group], view: BatchView, rng: np.random.Generator) -> list[Candidates]:
        """Each group's candidates, in order."""

    def settle(
        self,
        judge: Judge,
        groups: Sequence[Group],
        candidates: Sequence[Candidates],
        scores: Sequence[Scores | None],
        view: BatchView,
        rng: np.random.Generator,
    ) -> list[Judged]:
        """Each group with its candidates and the judge's verdict on them."""
        return judge.select_each(groups, candidates, scores, rng)


class PolicyRubrics(Source):
    """The method: the policy writes the candidates (`orsd_gym.algos.orsd.proposer.Proposer`)."""

    def __init__(self, proposer: Proposer) -> None:
        self.proposer = proposer

    def propose(self, groups: Sequence[Group], view: BatchView, rng: np.random.Generator) -> list[Candidates]:
        return self.proposer.propose(groups, view, rng)


class ExpertRubrics(Source):
    """The positive control: one bundle per group restating the env expert's plan, applied."""

    def __init__(self, max_criteria: int) -> None:
        self.max_criteria = max_criteria

    def propose(self, groups: Sequence[Group], view: BatchView, rng: np.random.Generator) -> list[Candidates]:
        found = []
        for group in groups:
            bundle = expert_bundle_for(view.trajectories[group.attempts[0]], self.max_criteria)
            found.append(
                Candidates([bundle], applied=True) if bundle else Candidates([], reason="the expert's plan is empty")
            )
        return found


class FileRubrics(Source):
    """A person's rubrics: the file's bundles for each group's task."""

    def __init__(self, table: Mapping[str, list[list[str]]]) -> None:
        self.table = table

    def propose(self, groups: Sequence[Group], view: BatchView, rng: np.random.Generator) -> list[Candidates]:
        return [Candidates(file_bundles(self.table, group.task_key)) for group in groups]


class NoRubrics(Source):
    """Nothing before lending (a shuffled control of expert bundles writes none of its own)."""

    def propose(self, groups: Sequence[Group], view: BatchView, rng: np.random.Generator) -> list[Candidates]:
        return [Candidates([]) for _ in groups]


class Lending:
    """The negative control's lending: each mixed group gets a rubric written for another task."""

    def __init__(self, from_policy: bool, max_criteria: int) -> None:
        self.from_policy = from_policy
        self.max_criteria = max_criteria
        self.pool = ShuffledRubrics()

    def lend(self, own: Sequence[Judged], view: BatchView) -> list[Candidates]:
        """Each mixed group's candidates replaced by one other task's (to be verified and applied).

        The pool first learns the rubric of every task of the batch, the other workers' groups
        included (expert bundles: every group's, mixed or not; the policy's: each one ``own``
        selected), in group order; each group then borrows with a generator of its own, made
        from worker 0's ``view.seed`` and the group's id, so N workers lend exactly what one
        process lends (given a seed that does not depend on the worker's share of the batch)."""
        if self.from_policy:
            found = [(j.group.task_key, j.rubric) for j in own if j.rubric is not None]
        else:
            trajs = view.trajectories
            plans = [(g.task_key, expert_bundle_for(trajs[g.attempts[0]], self.max_criteria)) for g in view.groups]
            found = [(key, bundle) for key, bundle in plans if bundle]
        shares = view.peers.all_gather((found, view.seed))
        for share, _ in shares:
            for key, bundle in share:
                self.pool.remember(key, bundle)
        seed = shares[0][1]
        lent = []
        for settled in own:
            group = settled.group
            loan = self.pool.lend(group.task_key, np.random.default_rng([seed, group.group_id]))
            if loan is None:
                lent.append(replace(settled.candidates, bundles=[], reason="no rubric of another task yet"))
            else:
                key, bundle = loan
                lent.append(replace(settled.candidates, bundles=[bundle], lent_from=key, applied=True))
        return lent


class ShuffledControl(Source):
    """The negative control: each mixed group's rubric is another task's, lent after the ``own``
    source's candidates were judged (so the policy's selected ones can be lent), then judged."""

    def __init__(self, own: Source, lending: Lending) -> None:
        self.own = own
        self.lending = lending

    def draw(self, rng: np.random.Generator) -> int:
        # Drawn before anything consumes rng: worker 0 then draws what a single process draws,
        # whatever its share of the batch's mixed groups (every worker lends with worker 0's).
        return int(rng.integers(2**63 - 1))

    def propose(self, groups: Sequence[Group], view: BatchView, rng: np.random.Generator) -> list[Candidates]:
        return self.own.propose(groups, view, rng)

    def settle(
        self,
        judge: Judge,
        groups: Sequence[Group],
        candidates: Sequence[Candidates],
        scores: Sequence[Scores | None],
        view: BatchView,
        rng: np.random.Generator,
    ) -> list[Judged]:
        own = judge.select_each(groups, candidates, scores, rng)
        lent = self.lending.lend(own, view)
        return judge.select_each(groups, lent, judge.verify(groups, lent, view), rng)


def make_source(config: ORSDConfig, proposer: Proposer, lending: Lending) -> Source:
    """The ``rubric_source`` of ``config``."""
    if config.rubric_source == "file":
        return FileRubrics(load_rubric_file(config.rubric_file) if config.rubric_file else {})
    if config.rubric_source == "expert":
        return ExpertRubrics(config.max_criteria)
    if config.rubric_source == "policy":
        return PolicyRubrics(proposer)
    return ShuffledControl(PolicyRubrics(proposer) if config.shuffled_from == "policy" else NoRubrics(), lending)
