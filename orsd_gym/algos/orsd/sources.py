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
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import numpy as np
import yaml

from orsd_gym.algos.base import Peers
from orsd_gym.algos.orsd.expert_rubric import expert_bundle_for
from orsd_gym.algos.orsd.groups import GroupWork
from orsd_gym.errors import ConfigError
from orsd_gym.policies.base import Policy
from orsd_gym.rollout.trajectory import Trajectory

RubricSource = Literal["policy", "expert", "shuffled", "file"]
#: Sources whose single bundle is applied without the alignment gate (the controls).
APPLIED_WITHOUT_SELECTION = ("expert", "shuffled")
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


class ExpertRubrics:
    """The positive control: one bundle per group restating the env expert's plan."""

    def __init__(self, max_criteria: int) -> None:
        self.max_criteria = max_criteria

    def fill(self, groups: list[GroupWork], trajs: list[Trajectory], policy: Policy, rng: np.random.Generator) -> None:
        for group in groups:
            bundle = expert_bundle_for(trajs[group.attempts[0]], self.max_criteria)
            group.bundles = [bundle] if bundle else []
            group.reason = "" if bundle else "the expert's plan is empty"


class FileRubrics:
    """A person's rubrics: the file's bundles for each group's task."""

    def __init__(self, table: Mapping[str, list[list[str]]]) -> None:
        self.table = table

    def fill(self, groups: list[GroupWork], trajs: list[Trajectory], policy: Policy, rng: np.random.Generator) -> None:
        for group in groups:
            group.bundles = file_bundles(self.table, group.task_key)


class PolicyRubrics:
    """The method: the policy writes the candidates (`orsd_gym.algos.orsd.proposer.Proposer`)."""

    def __init__(self, proposer: Any) -> None:
        self.proposer = proposer

    def fill(self, groups: list[GroupWork], trajs: list[Trajectory], policy: Policy, rng: np.random.Generator) -> None:
        self.proposer.propose(groups, trajs, policy, rng)


class NoRubrics:
    """Nothing before lending (a shuffled control of expert bundles writes none of its own)."""

    def fill(self, groups: list[GroupWork], trajs: list[Trajectory], policy: Policy, rng: np.random.Generator) -> None:
        return None


class Lending:
    """The negative control's lending: each mixed group gets a rubric written for another task."""

    def __init__(self, from_policy: bool, max_criteria: int) -> None:
        self.from_policy = from_policy
        self.max_criteria = max_criteria
        self.pool = ShuffledRubrics()

    def lend(
        self,
        groups: list[GroupWork],
        active: list[GroupWork],
        trajs: list[Trajectory],
        seed: int,
        peers: Peers,
    ) -> None:
        """Replace each mixed group's bundles with one other task's (to be verified and applied).

        The pool first learns the rubric of every task of the batch, the other workers' groups
        included (expert bundles: every group's, mixed or not; the policy's: each selected one),
        in group order; each group then borrows with a generator of its own, made from worker
        0's ``seed`` and the group's id, so N workers lend exactly what one process lends (given
        a ``seed`` that does not depend on the worker's share of the batch)."""
        if self.from_policy:
            found = [(g.task_key, g.bundles[g.selected]) for g in groups if g.selected is not None]
        else:
            plans = [(g.task_key, expert_bundle_for(trajs[g.attempts[0]], self.max_criteria)) for g in groups]
            found = [(key, bundle) for key, bundle in plans if bundle]
        shares = peers.all_gather((found, seed))
        for share, _ in shares:
            for key, bundle in share:
                self.pool.remember(key, bundle)
        seed = shares[0][1]
        for group in active:
            lent = self.pool.lend(group.task_key, np.random.default_rng([seed, group.group_id]))
            group.bundles, group.scores, group.correlations, group.selected = [], None, None, None
            if lent is None:
                group.reason = "no rubric of another task yet"
                continue
            group.lent_from, bundle = lent
            group.bundles = [bundle]
