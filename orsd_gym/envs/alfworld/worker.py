"""The engine in a child process that is replaced every ``recycle_after`` game loads.

TextWorld's PDDL engine keeps memory across game loads (Fast Downward's library state, parser
caches), so a long training run that resets thousands of different games would grow without
bound. `RecyclingEngine` has the `PddlGameEngine` interface but plays in a child process and
starts a fresh one every ``recycle_after`` loads of a new game, which keeps memory flat.

A plain `subprocess` (not `multiprocessing`) child, so it also works inside Gymnasium's
AsyncVectorEnv workers, which are daemonic and may not fork multiprocessing children. The
protocol is one JSON object per line on the child's stdin/stdout.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict

from orsd_gym.envs.alfworld.engine import EngineState, PddlGameEngine
from orsd_gym.envs.base import ExpertMode, check_expert_mode
from orsd_gym.errors import EngineError


class RecyclingEngine:
    """`PddlGameEngine` in a child process, recycled every ``recycle_after`` new-game loads."""

    def __init__(self, *, expert: ExpertMode = False, recycle_after: int = 200) -> None:
        if not isinstance(recycle_after, int) or recycle_after < 1:
            raise ValueError(f"recycle_after must be an int >= 1, got {recycle_after!r}")
        self.expert = check_expert_mode(expert)
        self.recycle_after = recycle_after
        self._child: subprocess.Popen | None = None
        self._loads = 0
        self._loaded: str | None = None
        self.recycled = 0  # how many children were replaced (for benchmarks and tests)

    def reset(self, game_file: str) -> EngineState:
        if game_file != self._loaded:
            if self._child is not None and self._loads >= self.recycle_after:
                self._stop()
                self.recycled += 1
            self._loads += 1
        self._loaded = game_file
        return self._call({"op": "reset", "game_file": game_file})

    def step(self, command: str) -> EngineState:
        return self._call({"op": "step", "command": command})

    def close(self) -> None:
        self._stop()
        self._loaded = None

    def _start(self) -> subprocess.Popen:
        args = [sys.executable, "-m", "orsd_gym.envs.alfworld.worker", json.dumps(self.expert)]
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        return subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)

    def _stop(self) -> None:
        if self._child is not None:
            try:
                self._child.stdin.close()
                self._child.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                self._child.kill()
                self._child.wait()
            self._child = None
            self._loads = 0

    def _call(self, request: dict) -> EngineState:
        if self._child is None:
            self._child = self._start()
            self._loads = 1
        try:
            self._child.stdin.write(json.dumps(request) + "\n")
            self._child.stdin.flush()
            line = self._child.stdout.readline()
        except (BrokenPipeError, OSError) as error:
            self._child = None
            raise EngineError(f"the ALFWorld engine worker died: {error}") from error
        if not line:
            code = self._child.poll()
            self._child = None
            raise EngineError(f"the ALFWorld engine worker exited (status {code})")
        reply = json.loads(line)
        if "error" in reply:
            raise EngineError(reply["error"])
        return EngineState(**reply)

    def __del__(self) -> None:
        self._stop()


def _serve(expert: ExpertMode) -> None:
    # Keep the protocol stream private: anything the engine prints goes to stderr.
    protocol = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    sys.stdout = sys.stderr
    engine = PddlGameEngine(expert=expert)
    for line in sys.stdin:
        request = json.loads(line)
        try:
            if request["op"] == "reset":
                state = engine.reset(request["game_file"])
            else:
                state = engine.step(request["command"])
            reply = asdict(state)
        except EngineError as error:
            reply = {"error": str(error)}
        protocol.write(json.dumps(reply) + "\n")
        protocol.flush()


if __name__ == "__main__":
    _serve(check_expert_mode(json.loads(sys.argv[1])))
