"""Single-player TextArena games as orsd-gym envs (``pip install 'orsd-gym[textarena]'``).

``gym.make("orsd_gym/TextArena-v0", game="GuessTheNumber-v0")``: the game is made with
TextArena's own ``make`` (so its registered action wrappers apply: a move without brackets is
bracketed, as TextArena does for LLM players); each step sends one move and shows the game's
new messages, as TextArena's LLM observation wrapper words them but without the player's own
move echoed back (the chat already holds it). When the game ends, its reward is the episode's
reward and ``info["score"]``, and the game is won at 1.0, TextArena's "solved" outcome (a game
that runs out of turns scores its own completion share).

One rule differs, because the contract wants an invalid action to change nothing: TextArena
ends a game after two invalid moves in a row; here an invalid move always gets the game's own
feedback ("You attempted an invalid move. Reason: ...") and ``is_valid_action=False``, and the
episode's step budget ends an episode of invalid moves (truncated).

Each game runs on its own `random` state (TextArena seeds and draws from Python's global one),
so a game is a pure function of its seed and moves and leaves other code's random draws alone.
"""

from __future__ import annotations

import contextlib
import functools
import io
import math
import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from orsd_gym.envs.adapters.common import check_split, content_key, content_splits, distinct_on_side, require
from orsd_gym.envs.base import StepOutcome, TaskSplits, TextEnv
from orsd_gym.envs.presentation import EnvPrompt

EXTRA = "textarena"
#: Seeds whose games a split is taken from (a game drawn twice is one task).
DEFAULT_SIZE = 100

#: TextArena's single-player games (their env classes) that play offline: the word games
#: (Hangman, Wordle, WordLadder, WordSearch) download NLTK word lists when imported, and
#: TwentyQuestions and GuessWho ask an online LLM; Klondike does not import in 0.7.4.
SINGLE_PLAYER_GAMES = (
    "BanditEnv",
    "BlackjackEnv",
    "CountdownEnv",
    "CrosswordsEnv",
    "CryptarithmEnv",
    "FifteenPuzzleEnv",
    "FrozenLakeEnv",
    "Game2048Env",
    "GuessTheNumberEnv",
    "LightsOutEnv",
    "LogicPuzzleEnv",
    "MastermindEnv",
    "MinesweeperEnv",
    "PegJumpEnv",
    "RushHourEnv",
    "SecretaryEnv",
    "SetEnv",
    "SlitherlinkEnv",
    "SokobanEnv",
    "SudokuEnv",
    "ThreeCardMonteEnv",
    "TowerOfHanoiEnv",
)
#: TextArena's registered variants that differ from their base id in wrappers only.
_WRAPPER_VARIANTS = ("-train", "-raw")


def _guess_the_number(game: Any) -> list[str]:
    return [f"[{n}]" for n in range(game.min_number, game.max_number + 1) if n not in game.guessed_numbers]


def _tower_of_hanoi(game: Any) -> list[str]:
    towers = game.state.game_state["towers"]
    return [
        f"[{source} {target}]"
        for source in towers
        for target in towers
        if source != target and towers[source] and (not towers[target] or towers[target][-1] > towers[source][-1])
    ]


def _frozen_lake(game: Any) -> list[str]:
    row, column = game.state.game_state["player_pos"]
    return [
        f"[{name}]"
        for name, (d_row, d_column) in game.actions.items()
        if 0 <= row + d_row < game.size and 0 <= column + d_column < game.size
    ]


#: The legal moves of games whose move set is small and readable from their state.
ADMISSIBLE: Mapping[str, Callable[[Any], list[str]]] = {
    "GuessTheNumberEnv": _guess_the_number,
    "TowerOfHanoiEnv": _tower_of_hanoi,
    "FrozenLakeEnv": _frozen_lake,
}


def _registry() -> Mapping[str, Any]:
    return require("textarena", EXTRA).envs.registration.ENV_REGISTRY


def _game_class(entry_point: Any) -> str:
    return entry_point.rpartition(":")[2] if isinstance(entry_point, str) else getattr(entry_point, "__name__", "")


def game_ids(*, variants: bool = False) -> list[str]:
    """TextArena ids of the single-player games this adapter plays (``variants``: with the
    ``-train`` / ``-raw`` ids that differ from a base id only in TextArena's wrappers)."""
    ids = [
        game_id
        for game_id, spec in _registry().items()
        if _game_class(spec.entry_point) in SINGLE_PLAYER_GAMES
        and (variants or not game_id.endswith(_WRAPPER_VARIANTS))
    ]
    return sorted(ids)


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Some games print their generator's progress; keep it out of the caller's output."""
    with contextlib.redirect_stdout(io.StringIO()):
        yield


def _core(game: Any) -> Any:
    """The game inside TextArena's wrappers."""
    textarena = require("textarena", EXTRA)
    while isinstance(game, textarena.Wrapper):
        game = game.env
    return game


def _render(messages: Sequence[tuple[int, str, Any]], textarena: Any) -> str:
    """A game's messages as TextArena's LLM observation wrapper shows them, less the player's own moves."""
    shown = []
    for sender, message, kind in messages:
        if kind == textarena.ObservationType.PLAYER_ACTION:
            continue
        name = "GAME" if sender == textarena.GAME_ID else f"Player {sender}"
        shown.append(f"[{name}] {message}")
    return "\n".join(shown)


class _Game:
    """One TextArena game with its own `random` state."""

    def __init__(self, game_id: str) -> None:
        self.textarena = require("textarena", EXTRA)
        with _quiet():
            self.wrapped = self.textarena.make(game_id)
        self.core = _core(self.wrapped)
        self._random_state = random.Random(0).getstate()

    @contextlib.contextmanager
    def _own_random(self) -> Iterator[None]:
        outside = random.getstate()
        random.setstate(self._random_state)
        try:
            with _quiet():
                yield
        finally:
            self._random_state = random.getstate()
            random.setstate(outside)

    def reset(self, seed: int) -> str:
        with self._own_random():
            self.core.reset(num_players=1, seed=seed)
            # The contract keeps invalid moves from ending the game (see the module docstring).
            self.core.state.error_allowance = math.inf
            _, messages = self.core.get_observation()
        return _render(messages, self.textarena)

    def step(self, action: str) -> tuple[bool, bool, str]:
        """Play ``action``: (whether the game rejected it, whether the game is over, its new messages)."""
        errors_before = self.core.state.error_count
        with self._own_random():
            done, _ = self.wrapped.step(action)
            _, messages = self.core.get_observation()
        # A rejected move raises the error count; any accepted one resets it to 0.
        rejected = self.core.state.error_count > errors_before and not done
        return rejected, bool(done), _render(messages, self.textarena)

    def outcome(self) -> tuple[float, str]:
        """The finished game's reward for the player and TextArena's reason for it."""
        return float(self.core.state.rewards[0]), str(self.core.state.game_info[0].get("reason") or "")


@functools.lru_cache(maxsize=8)
def _starts(game_id: str, seed: int, size: int) -> tuple[tuple[int, str], ...]:
    """(TextArena seed, content key) of the games of seeds ``seed ..
    seed + size - 1``, made once per process. The key hashes the game's whole starting state,
    hidden parts included (GuessTheNumber's number), and its first observation."""
    known = game_ids(variants=True)
    if game_id not in known:
        raise ValueError(
            f"game={game_id!r} is not a single-player TextArena game that plays offline; choose one of: "
            f"{', '.join(game_ids())} (or their -train / -raw variants)"
        )
    game = _Game(game_id)
    starts = []
    for game_seed in range(seed, seed + size):
        observation = game.reset(game_seed)
        key = content_key(type(game.core).__name__, game.core.state.game_state, observation)
        starts.append((game_seed, key))
    return tuple(starts)


class TextArenaEnv(TextEnv):
    """A single-player TextArena game (see the module docstring).

    Tasks are the distinct starting positions of the games of seeds ``seed .. seed + size - 1``;
    ``split`` keeps the held-out ones (``"eval"``: content hash 0 mod 5), the others
    (``"train"``) or all. A game that always starts the same way (TowerOfHanoi) has one task.
    """

    prompt = EnvPrompt(
        "You are playing a single-player text game. Each turn, send exactly one move, written the way the "
        "game's instructions ask (TextArena games read the move inside square brackets, e.g. [A C]).",
        show_admissible=True,
        noop_action="[]",
    )

    def __init__(
        self,
        game: str | None = None,
        split: str = "all",
        size: int = DEFAULT_SIZE,
        seed: int = 0,
        render_mode: str | None = None,
    ) -> None:
        super().__init__(render_mode=render_mode)
        if game is None:
            raise ValueError(f"TextArena-v0 needs game=ID; single-player games: {', '.join(game_ids())}")
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"size must be a positive int, got {size!r}")
        self.game = game
        self.split = check_split(split)
        starts = _starts(game, seed, size)
        chosen = distinct_on_side([key for _, key in starts], self.split)
        self._starts = [starts[index] for index in chosen]
        self._game = _Game(game)
        self._admissible = ADMISSIBLE.get(type(self._game.core).__name__)

    @property
    def tasks(self) -> Sequence[tuple[int, str]]:
        return self._starts

    @classmethod
    def task_splits(cls, kwargs: Mapping[str, Any]) -> TaskSplits:
        return content_splits(kwargs, "TextArena")

    def task_key(self, task_id: int) -> str:
        return f"{self.game}/{self._starts[task_id][1]}"

    def _task_text(self, task_id: int) -> str:
        return f"Win the TextArena game {self.game}."

    def _start_task(self, task_id: int, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        observation = self._game.reset(self._starts[task_id][0])
        return observation, {"task_type": self.game}

    def admissible_actions(self) -> list[str]:
        return self._admissible(self._game.core) if self._admissible is not None else []

    def _play(self, action: str) -> StepOutcome:
        rejected, done, observation = self._game.step(action)
        if not done:
            return StepOutcome(observation, is_valid_action=not rejected)
        score, reason = self._game.outcome()
        ending = " ".join(part for part in ("[GAME]", reason, f"Score: {score:g}.") if part)
        return StepOutcome(
            f"{observation}\n{ending}" if observation else ending,
            reward=score,
            terminated=True,
            won=score >= 1.0,
            info={"score": score},
        )
