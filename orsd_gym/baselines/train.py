"""`train_baseline`: train a classic-RL baseline on given training tasks, evaluate it on held-out tasks.

The comparison calls it once per (algorithm, seed) with the same task lists it gives GRPO and
ORSD, and gets a learning curve against environment steps.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import gymnasium as gym
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv, VecEnv

from orsd_gym import jsonio
from orsd_gym.baselines.algorithms import ALGORITHMS, SB3_ALGORITHMS, RandomAdmissibleAgent
from orsd_gym.baselines.envs import make_choice_env
from orsd_gym.baselines.evaluation import EvalPoint, evaluate
from orsd_gym.envs.tasks import TaskSpec, as_task_spec
from orsd_gym.jsonio import json_safe
from orsd_gym.wrappers import TextEncoder
from orsd_gym.wrappers.encoders import make_encoder
from orsd_gym.writable import write_file, write_with

AlgoName = Literal["maskable_ppo", "ppo", "dqn", "random"]
MODEL_FILE = "model.zip"
RESULT_FILE = "result.json"


@dataclass
class BaselineResult:
    """A baseline run: the held-out learning curve against env steps, and training throughput.

    ``curve[0]`` is the untrained policy (env_steps 0); the `random` baseline has only that point.
    ``env_steps_per_second`` counts training env steps over training wall time (rollouts and
    gradient updates; held-out evaluation excluded).
    """

    algo: str
    env_id: str
    seed: int
    curve: list[EvalPoint]
    train_env_steps: int
    train_seconds: float
    env_steps_per_second: float
    model_path: str | None
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def final(self) -> EvalPoint:
        return self.curve[-1]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class _PeriodicEvaluation(BaseCallback):
    """Evaluates on the held-out tasks at step 0, every ``every`` env steps and at the end."""

    def __init__(self, evaluate_at: Callable[[BaseAlgorithm, int], EvalPoint], every: int) -> None:
        super().__init__()
        self.evaluate_at = evaluate_at
        self.every = every
        self.next_at = every
        self.curve: list[EvalPoint] = []
        self.eval_seconds = 0.0

    def _evaluate(self) -> None:
        start = time.perf_counter()
        self.curve.append(self.evaluate_at(self.model, self.num_timesteps))
        self.eval_seconds += time.perf_counter() - start

    def _on_training_start(self) -> None:
        self._evaluate()

    def _on_step(self) -> bool:
        if self.num_timesteps >= self.next_at:
            self._evaluate()
            self.next_at = (self.num_timesteps // self.every + 1) * self.every
        return True

    def _on_training_end(self) -> None:
        if self.curve[-1].env_steps < self.num_timesteps:
            self._evaluate()


def _vec_env(factory: Callable[..., gym.Env], n_envs: int, seed: int, subprocesses: bool) -> VecEnv:
    factories = [functools.partial(_monitored, factory, seed + rank) for rank in range(n_envs)]
    return SubprocVecEnv(factories) if subprocesses else DummyVecEnv(factories)


def _monitored(factory: Callable[..., gym.Env], seed: int) -> Monitor:
    return Monitor(factory(seed=seed))


@dataclass(frozen=True)
class BaselineConfig:
    """How a classic-RL baseline trains and is evaluated (what `train_baseline` takes)."""

    #: The algorithm: "maskable_ppo", "ppo", "dqn" (SB3) or "random" (uniform over admissible actions).
    algo: AlgoName = "maskable_ppo"
    #: Environment steps of training (SB3 collects whole rollouts: it may run a little past).
    total_env_steps: int = 20_000
    #: Evaluate every N training env steps (and before training and at the end).
    eval_every_steps: int = 5_000
    #: Seeds the model, the training envs' task passes (sub-env i: seed + i) and random play.
    seed: int = 0
    #: Arguments of ``gym.make`` for the training envs.
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    #: Arguments of ``gym.make`` for the evaluation env (None: ``env_kwargs``), for envs whose
    #: held-out side is other data (WebShop's test goals, ALFWorld's valid games).
    eval_env_kwargs: dict[str, Any] | None = None
    #: Admissible-action slots of the fixed-size action space (`make_choice_env`).
    max_actions: int = 16
    #: How text becomes the observation vector: "hashed" bag of words, or a `TextEncoder`.
    encoder: str | TextEncoder = "hashed"
    #: Previous steps the observation shows.
    history: int = 2
    #: Training envs stepped side by side.
    n_envs: int = 1
    #: Step the training envs in subprocesses (``SubprocVecEnv``).
    subprocesses: bool = False
    #: Overrides of the algorithm's defaults (`SB3_ALGORITHMS`), e.g. ``{"policy_kwargs": {...}}``.
    algo_kwargs: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.algo not in ALGORITHMS:
            raise ValueError(f"unknown baseline algo {self.algo!r}; choose one of {', '.join(ALGORITHMS)}")
        if self.total_env_steps < 1 or self.eval_every_steps < 1 or self.n_envs < 1:
            raise ValueError("total_env_steps, eval_every_steps and n_envs must be >= 1")


def train_baseline(
    env_id: str,
    train_tasks: Sequence[int | TaskSpec],
    eval_tasks: Sequence[int | TaskSpec],
    config: BaselineConfig | None = None,
    *,
    out_dir: str | Path | None = None,
) -> BaselineResult:
    """Train ``config.algo`` on ``train_tasks`` and evaluate it on every task of ``eval_tasks``.

    Tasks are int reset seeds or `TaskSpec(seed, task_id)`, as for `collect`; training tasks are
    tasks of ``gym.make(env_id, **config.env_kwargs)``, held-out ones of the evaluation env
    (`BaselineConfig.eval_env_kwargs`). Training envs play ``train_tasks`` in seeded passes
    (`TaskSchedule`); evaluation plays each held-out task once with the deterministic policy,
    before training, every ``eval_every_steps`` env steps and at the end
    (``train_env_steps`` is the real count of training steps).
    With ``out_dir``, the model is saved as ``model.zip`` (reload with `load_baseline`) and the
    result as ``result.json``.
    """
    config = config or BaselineConfig()
    algo, seed = config.algo, config.seed
    train_tasks = [as_task_spec(t) for t in train_tasks]
    eval_tasks = [as_task_spec(t) for t in eval_tasks]
    encoder = make_encoder(config.encoder)  # one instance: a model encoder then loads once per process
    settings = {
        "train_tasks": [asdict(t) for t in train_tasks],
        "eval_tasks": [asdict(t) for t in eval_tasks],
        **{k: v for k, v in asdict(config).items() if k not in ("algo", "seed", "encoder")},
        "encoder": repr(encoder),
    }
    wrapping = {"max_actions": config.max_actions, "encoder": encoder, "history": config.history}
    eval_kwargs = config.env_kwargs if config.eval_env_kwargs is None else config.eval_env_kwargs
    # No TaskSchedule on the evaluation env: evaluation resets each held-out task by name.
    eval_env = make_choice_env(env_id, env_kwargs=eval_kwargs, **wrapping)

    if algo == "random":
        with eval_env:
            point = evaluate(RandomAdmissibleAgent(seed), eval_env, eval_tasks, env_steps=0, takes_action_masks=True)
        return _save(BaselineResult(algo, env_id, seed, [point], 0, 0.0, 0.0, None, settings), None, out_dir)

    spec = SB3_ALGORITHMS[algo]
    train_env = _vec_env(
        functools.partial(make_choice_env, env_id, env_kwargs=config.env_kwargs, tasks=train_tasks, **wrapping),
        config.n_envs,
        seed,
        config.subprocesses,
    )

    def evaluate_at(model: BaseAlgorithm, env_steps: int) -> EvalPoint:
        return evaluate(model, eval_env, eval_tasks, env_steps=env_steps, takes_action_masks=spec.takes_action_masks)

    callback = _PeriodicEvaluation(evaluate_at, config.eval_every_steps)
    with eval_env:
        try:
            model = spec.cls(spec.policy, train_env, seed=seed, verbose=0, **{**spec.defaults, **config.algo_kwargs})
            start = time.perf_counter()
            model.learn(total_timesteps=config.total_env_steps, callback=callback)
        finally:
            train_env.close()
    train_seconds = time.perf_counter() - start - callback.eval_seconds
    steps = int(model.num_timesteps)
    result = BaselineResult(
        algo, env_id, seed, callback.curve, steps, train_seconds, steps / max(train_seconds, 1e-9), None, settings
    )
    return _save(result, model, out_dir)


def _save(result: BaselineResult, model: BaseAlgorithm | None, out_dir: str | Path | None) -> BaselineResult:
    if out_dir is None:
        return result
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if model is not None:
        write_with(out / MODEL_FILE, "the baseline's model", model.save)
        result.model_path = str(out / MODEL_FILE)
    write_file(out / RESULT_FILE, jsonio.dumps(json_safe(result.to_dict()), indent=2), "the baseline's result")
    return result


def load_baseline(path: str | Path, algo: AlgoName, *, env: Any = None) -> BaseAlgorithm:
    """Load a model saved by `train_baseline` (``model.zip``, or the run's ``out_dir``)."""
    path = Path(path)
    if path.is_dir():
        path = path / MODEL_FILE
    if algo not in SB3_ALGORITHMS:
        raise ValueError(f"{algo!r} has no saved model; choose one of {', '.join(SB3_ALGORITHMS)}")
    return SB3_ALGORITHMS[algo].cls.load(path, env=env)
