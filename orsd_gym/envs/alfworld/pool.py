"""The generated task pool: lazily generated, planner-checked, cached on disk.

Task ``i`` of a pool is a pure function of (generator version, config, task types, domain and
grammar, side, ``i``), where the side is the training floor plans or the held-out ones: it is
drawn from ``numpy.random.default_rng([seed, i, attempt])`` and the first attempt whose game
the planner solves (and whose plan really wins when played) is kept. The checked game is
written to ``<cache>/alfworld/generated/<content key>/<side>/task-<i>.tw-pddl``, so a second run
(or another process of a vector env) only reads files.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from orsd_gym.envs.alfworld.generator import GENERATOR_VERSION, GeneratorConfig, make_game, sample_task, task_type_for
from orsd_gym.envs.alfworld.logic import game_logic
from orsd_gym.envs.alfworld.tasks import ALFWorldTask
from orsd_gym.errors import GenerationError

CACHE_ENV_VAR = "ORSD_GYM_CACHE"
MAX_ATTEMPTS = 20


def default_cache_dir() -> Path:
    """``$ORSD_GYM_CACHE``, else ``$XDG_CACHE_HOME/orsd_gym``, else ``~/.cache/orsd_gym``."""
    if os.environ.get(CACHE_ENV_VAR):
        return Path(os.environ[CACHE_ENV_VAR]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "orsd_gym"


def pool_key(config: GeneratorConfig, task_types: Sequence[str]) -> str:
    """Content hash of everything but the side that decides the pool's games (not its size)."""
    logic = game_logic(config.wording)
    payload = {
        "version": GENERATOR_VERSION,
        "config": {k: v for k, v in config.to_dict().items() if k != "num_tasks"},
        "task_types": list(task_types),
        "domain": hashlib.sha256(logic.domain.encode()).hexdigest(),
        "grammar": hashlib.sha256(logic.grammar.encode()).hexdigest(),
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:20]


class GeneratedTaskPool(Sequence[ALFWorldTask]):
    """``config.num_tasks`` generated tasks; task ``i`` is made (or read from cache) on first access.

    ``held_out`` pools draw from the held-out floor plans only, the others from the rest.
    """

    def __init__(
        self,
        config: GeneratorConfig,
        task_types: Sequence[str],
        cache_dir: str | os.PathLike | None = None,
        *,
        held_out: bool = False,
    ):
        self.config = config
        self.task_types = tuple(task_types)
        self.held_out = held_out
        self.key = pool_key(config, self.task_types)
        self.side = "held_out" if held_out else "train"
        self.directory = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
        self.directory = self.directory / "alfworld" / "generated" / self.key / self.side
        self._tasks: dict[int, ALFWorldTask] = {}
        self._checker = None  # a PddlGameEngine(expert=True), made on the first cache miss

    def __len__(self) -> int:
        return self.config.num_tasks

    def __getitem__(self, index):  # type: ignore[override]
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if not -len(self) <= index < len(self):
            raise IndexError(f"task index {index} out of range for a pool of {len(self)}")
        index %= len(self)
        if index not in self._tasks:
            self._tasks[index] = self._load(index) or self._generate(index)
        return self._tasks[index]

    def task_key(self, index: int) -> str:
        """Names task ``index`` without generating it: the knobs' hash, the side and the index."""
        return f"generated:{self.key}:{self.side}:{index}"

    def close(self) -> None:
        if self._checker is not None:
            self._checker.close()
            self._checker = None

    # ------------------------------------------------------------------ cache
    def _paths(self, index: int) -> tuple[Path, Path]:
        stem = self.directory / f"task-{index:05d}"
        return stem.with_suffix(".tw-pddl"), stem.with_suffix(".json")

    def _load(self, index: int) -> ALFWorldTask | None:
        game_path, meta_path = self._paths(index)
        try:
            meta = json.loads(meta_path.read_text())
        except (OSError, ValueError):
            return None
        if not game_path.is_file():
            return None
        return ALFWorldTask(str(game_path), meta["task_type"], meta["goal"], "generated", meta["name"])

    def _write_atomic(self, path: Path, text: str) -> None:
        # Several vector-env workers may make the same task at once: write aside, then rename.
        fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=path.name, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)

    # ------------------------------------------------------------------ generation
    def _generate(self, index: int) -> ALFWorldTask:
        from orsd_gym.envs.alfworld.engine import PddlGameEngine

        self.directory.mkdir(parents=True, exist_ok=True)
        task_type = task_type_for(index, self.task_types)
        game_path, meta_path = self._paths(index)
        for attempt in range(MAX_ATTEMPTS):
            rng = np.random.default_rng([self.config.seed, index, attempt])
            spec, problem = sample_task(task_type, self.config, rng, held_out=self.held_out)
            game = make_game(spec, problem, self.config.wording)
            candidate = self.directory / f"candidate-{index:05d}-{os.getpid()}.tw-pddl"
            candidate.write_text(json.dumps(game))
            try:
                if self._checker is None:
                    self._checker = PddlGameEngine(expert=True)
                plan = _winning_plan(self._checker, str(candidate))
            finally:
                candidate.unlink(missing_ok=True)
            if plan:
                game["solvable"] = True
                name = (
                    f"{task_type}-{spec.obj}-{spec.toggle or 'None'}-{spec.recep or 'None'}-{spec.scene}"
                    f"/seed{self.config.seed}_{self.side}_task{index}"
                )
                self._write_atomic(game_path, json.dumps(game))
                meta = {"task_type": task_type, "goal": spec.goal, "name": name, "plan": plan, "attempt": attempt}
                self._write_atomic(meta_path, json.dumps(meta))
                return ALFWorldTask(str(game_path), task_type, spec.goal, "generated", name)
        raise GenerationError(
            f"no solvable {task_type} task after {MAX_ATTEMPTS} attempts for task {index} with {self.config}"
        )


def _winning_plan(engine, game_file: str) -> list[str] | None:
    """The planner's plan if following it wins the game, else None."""
    state = engine.reset(game_file)
    plan = list(state.expert_actions or [])
    if state.won or not plan:
        return None  # already solved at the start, or no plan: not a task
    for action in plan:
        state = engine.step(action)
        if not state.is_valid_action:
            return None
    return plan if state.won else None
