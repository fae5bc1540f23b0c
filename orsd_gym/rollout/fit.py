"""Observations cut to the room the model's next turn leaves them.

The rule: an observation may fill a sample's token budget (`RolloutOptions.max_episode_tokens`)
except the room of the model's next turn (`reserved_turn`: ``max_new_tokens``, at most half
the budget). An observation that would leave less (a page dump, a log of a few MB) is cut to
its longest head that leaves that room, closed with a marker the model reads (`CUT_MARKER`:
how many characters of how many it is shown). When not even the marker leaves the model a
token, the episode ends truncated (``cut_by="max_episode_tokens"``), as any episode that runs
out of budget does. The collector records each cut in the step's info (``observation_cut``) and
counts them (``extra["observations_cut"]``, the ``observations_cut`` statistic).
"""

from __future__ import annotations

from collections.abc import Callable

#: What closes a cut observation, so the model knows it was shown part of it.
CUT_MARKER = "\n[... observation cut to fit the context: {shown} of {total} characters shown]"

#: A token spans at most this many characters in practice (long runs of spaces or dashes);
#: it bounds how much of a huge observation is ever tokenised to find its cut.
MAX_CHARS_PER_TOKEN = 32


def reserved_turn(max_new_tokens: int, token_budget: int) -> int:
    """The tokens an observation leaves for the model's next turn."""
    return max(1, min(max_new_tokens, token_budget // 2))


def cut_observation(observation: str, shown: int) -> str:
    """The first ``shown`` characters of ``observation`` and the marker that says so."""
    return observation[:shown] + CUT_MARKER.format(shown=shown, total=len(observation))


def fit_observation(
    observation: str, room_after: Callable[[str], int], reserve: int, budget: int
) -> tuple[str, int | None]:
    """``observation`` as the model is shown it, and how many of its characters when it was
    cut (None: it was not): whole when
    ``room_after(observation)`` (the tokens its message leaves of the sample's ``budget``) is at
    least ``reserve``, else its longest head (with `CUT_MARKER`) that leaves that much; the
    marker alone when no head does."""
    # More characters than the whole budget holds never fit: not worth tokenising whole.
    if len(observation) <= budget * MAX_CHARS_PER_TOKEN and room_after(observation) >= reserve:
        return observation, None
    spare = room_after(cut_observation(observation, 0)) - reserve
    low, high = 0, min(len(observation), max(0, spare) * MAX_CHARS_PER_TOKEN)
    while low < high:  # the longest head that still leaves the reserve
        middle = (low + high + 1) // 2
        if room_after(cut_observation(observation, middle)) >= reserve:
            low = middle
        else:
            high = middle - 1
    return cut_observation(observation, low), low
