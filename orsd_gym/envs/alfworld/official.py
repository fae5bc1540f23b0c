"""The official ALFWorld text games (json_2.1.1) with ALFWorld's own filters.

Layout (what ``alfworld-download`` writes under ``$ALFWORLD_DATA``)::

    <data_dir>/json_2.1.1/<split>/<task-folder>/<trial>/game.tw-pddl
                                                       /traj_data.json

Filters, as ``AlfredTWEnv.collect_game_files`` applies them: skip "movable" and "Sliced"
folders, keep the requested task types (``traj_data.json``'s ``task_type``), keep only games
marked ``solvable``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

from orsd_gym.envs.alfworld.tasks import ALFWorldTask
from orsd_gym.envs.alfworld.text import goal_from_grammar
from orsd_gym.errors import ALFWorldDataNotFoundError

OFFICIAL_SPLITS = ("train", "valid_seen", "valid_unseen")
DATA_ENV_VAR = "ALFWORLD_DATA"
_HOW_TO_GET = (
    "Get the official games with `pip install alfworld && alfworld-download` (it writes to "
    f"${DATA_ENV_VAR}, default ~/.cache/alfworld), then pass data_dir=... or set ${DATA_ENV_VAR}; "
    "or use split='generated' for procedurally generated tasks that need no download."
)


def resolve_data_dir(data_dir: str | os.PathLike | None) -> Path:
    """``data_dir`` or ``$ALFWORLD_DATA``; a clear error when neither is given."""
    if data_dir is None:
        data_dir = os.environ.get(DATA_ENV_VAR)
        if not data_dir:
            raise ALFWorldDataNotFoundError(f"no data_dir given and ${DATA_ENV_VAR} is not set. {_HOW_TO_GET}")
    return Path(data_dir).expanduser()


def split_dir(data_dir: Path, split: str) -> Path:
    """Where the split's games live; accepts ``data_dir`` at, above or inside ``json_2.1.1``."""
    for candidate in (data_dir / "json_2.1.1" / split, data_dir / split):
        if candidate.is_dir():
            return candidate
    raise ALFWorldDataNotFoundError(
        f"ALFWorld split {split!r} not found: looked for {data_dir / 'json_2.1.1' / split} "
        f"and {data_dir / split}. {_HOW_TO_GET}"
    )


def collect_official_tasks(data_dir: Path, split: str, task_types: Sequence[str]) -> list[ALFWorldTask]:
    """The split's playable games, sorted by path (a stable task order)."""
    root = split_dir(data_dir, split)
    wanted = set(task_types)
    tasks = []
    for traj_path in sorted(root.glob("*/*/traj_data.json")):
        trial_dir = traj_path.parent
        relative = trial_dir.relative_to(root).as_posix()
        if "movable" in relative or "Sliced" in relative:
            continue
        game_path = trial_dir / "game.tw-pddl"
        if not game_path.is_file():
            continue
        with open(traj_path) as f:
            task_type = json.load(f).get("task_type")
        if task_type not in wanted:
            continue
        with open(game_path) as f:
            game = json.load(f)
        if not game.get("solvable", False):
            continue
        tasks.append(ALFWorldTask(str(game_path), task_type, goal_from_grammar(game["grammar"]), split, relative))
    if not tasks:
        raise ALFWorldDataNotFoundError(
            f"no playable ALFWorld games under {root} for task types {sorted(wanted)} "
            f"(expected <task-folder>/<trial>/game.tw-pddl + traj_data.json). {_HOW_TO_GET}"
        )
    return tasks
