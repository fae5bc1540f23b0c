"""stable-baselines3 baselines: DRRN policies, masking (also through SubprocVecEnv), save/load,
`train_baseline`, and MaskablePPO beating the random baseline on a small env."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("stable_baselines3")
pytest.importorskip("sb3_contrib")

import torch
from sb3_contrib import MaskablePPO
from sb3_contrib.common.maskable.utils import get_action_masks
from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

from orsd_gym.baselines import (
    SB3_ALGORITHMS,
    BaselineConfig,
    RandomAdmissibleAgent,
    evaluate,
    load_baseline,
    make_choice_env,
    train_baseline,
)
from orsd_gym.baselines.policies import EMPTY_SLOT_SCORE
from orsd_gym.rollout import TaskSpec
from orsd_gym.wrappers import ModelEncoder

GUESS = "orsd_gym/GuessNumber-v0"
#: 8 numbers, 12 slots: at least 4 slots are always empty, more as the range shrinks.
SMALL = {"env_kwargs": {"high": 8}, "max_actions": 12}
TASKS = [TaskSpec(seed=0, task_id=k) for k in range(8)]


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


class EmptySlotCounter(BaseCallback):
    """Counts training steps whose chosen slot held no action."""

    def __init__(self) -> None:
        super().__init__()
        self.empty = 0
        self.steps = 0

    def _on_step(self) -> bool:
        self.empty += sum(info["empty_slot"] for info in self.locals["infos"])
        self.steps += len(self.locals["infos"])
        return True


def small_vec_env(n_envs: int = 2, **kwargs) -> DummyVecEnv:
    return DummyVecEnv(
        [lambda i=i: Monitor(make_choice_env(GUESS, tasks=TASKS, seed=i, **SMALL, **kwargs)) for i in range(n_envs)]
    )


def make_model(algo: str, env, **overrides):
    spec = SB3_ALGORITHMS[algo]
    return spec.cls(spec.policy, env, seed=0, **{**spec.defaults, **overrides})


def sample_observations(n: int = 20) -> list[dict[str, np.ndarray]]:
    env = make_choice_env(GUESS, tasks=TASKS, **SMALL)
    observations, rng = [], np.random.default_rng(0)
    obs, _ = env.reset(seed=0)
    while len(observations) < n:
        observations.append(obs)
        obs, _, terminated, truncated, _ = env.step(rng.choice(np.flatnonzero(env.action_masks())))
        if terminated or truncated:
            obs, _ = env.reset()
    return observations


# --------------------------------------------------------------------------- DRRN policies
def _scores(model, obs: dict[str, np.ndarray]) -> np.ndarray:
    tensor, _ = model.policy.obs_to_tensor(obs)
    with torch.no_grad():
        if hasattr(model, "q_net"):
            return model.q_net(tensor)[0].numpy()
        return model.policy.get_distribution(tensor).distribution.logits[0].numpy()


@pytest.mark.parametrize("algo", ["maskable_ppo", "ppo", "dqn"])
def test_drrn_scores_follow_the_action_text_not_the_slot(algo):
    model = make_model(algo, small_vec_env(1))
    obs = sample_observations(1)[0]
    filled = int(obs["action_mask"].sum())
    permutation = np.random.default_rng(1).permutation(12)
    shuffled = {
        "state": obs["state"],
        "actions": obs["actions"][permutation],
        "action_mask": obs["action_mask"][permutation],
    }
    scores, shuffled_scores = _scores(model, obs), _scores(model, shuffled)
    assert np.allclose(shuffled_scores, scores[permutation], atol=1e-5)
    assert np.all(scores[filled:] <= EMPTY_SLOT_SCORE / 2) and np.all(np.abs(scores[:filled]) < 1e3)


# --------------------------------------------------------------------------- masking
def test_maskable_ppo_gets_masks_through_subproc_vec_env_with_a_model_encoder():
    # A generic policy (no DRRN head): empty slots can only be avoided through env.action_masks(),
    # fetched from the worker processes with env_method. The model encoder loads in each worker.
    factories = [
        lambda i=i: Monitor(make_choice_env(GUESS, tasks=TASKS, seed=i, encoder=ModelEncoder("tiny-random"), **SMALL))
        for i in range(2)
    ]
    vec_env = SubprocVecEnv(factories)
    try:
        obs = vec_env.reset()
        masks = get_action_masks(vec_env)
        assert masks.shape == (2, 12) and masks.dtype == bool
        assert np.array_equal(masks, obs["action_mask"].astype(bool))
        assert obs["state"].shape == (2, 64)
        model = MaskablePPO("MultiInputPolicy", vec_env, n_steps=64, batch_size=64, n_epochs=1, seed=0)
        counter = EmptySlotCounter()
        model.learn(256, callback=counter)
        assert counter.steps >= 256 and counter.empty == 0
    finally:
        vec_env.close()


def test_without_masks_empty_slots_do_get_chosen():
    # The counter's control: SB3's PPO with a generic policy knows nothing of the slots.
    counter = EmptySlotCounter()
    PPO("MultiInputPolicy", small_vec_env(), n_steps=64, batch_size=64, n_epochs=1, seed=0).learn(256, callback=counter)
    assert counter.empty > 0


@pytest.mark.parametrize("algo", ["maskable_ppo", "ppo", "dqn"])
def test_drrn_algorithms_never_take_empty_slots(algo):
    overrides = {"learning_starts": 100} if algo == "dqn" else {}
    counter = EmptySlotCounter()
    make_model(algo, small_vec_env(), **overrides).learn(512, callback=counter)  # DQN: warm-up and epsilon draws
    assert counter.steps >= 512 and counter.empty == 0


def test_random_agent_draws_uniformly_among_filled_slots():
    agent = RandomAdmissibleAgent(seed=0)
    mask = np.array([[1, 0, 1, 0], [0, 0, 0, 1]], dtype=np.int8)
    draws = np.array([agent.predict({"action_mask": mask})[0] for _ in range(400)])
    assert set(draws[:, 0]) == {0, 2} and set(draws[:, 1]) == {3}
    assert agent.predict({"action_mask": np.zeros(4)})[0] == 0  # nothing filled: slot 0, played as an empty slot


# --------------------------------------------------------------------------- save / load
@pytest.mark.parametrize("algo", ["maskable_ppo", "ppo", "dqn"])
def test_save_load_round_trips_the_same_actions(algo, tmp_path):
    model = make_model(algo, small_vec_env(1), **({"learning_starts": 50} if algo == "dqn" else {}))
    model.learn(256)
    model.save(tmp_path / "model.zip")
    loaded = load_baseline(tmp_path / "model.zip", algo)
    assert type(loaded.policy) is type(model.policy)
    for obs in sample_observations(30):
        masks = {"action_masks": obs["action_mask"].astype(bool)} if algo == "maskable_ppo" else {}
        assert model.predict(obs, deterministic=True, **masks)[0] == loaded.predict(obs, deterministic=True, **masks)[0]
        assert np.allclose(_scores(model, obs), _scores(loaded, obs))


# --------------------------------------------------------------------------- train_baseline
def test_train_baseline_curve_saving_and_reloading(tmp_path):
    result = train_baseline(
        GUESS,
        TASKS[:6],
        TASKS[6:],
        BaselineConfig(algo="maskable_ppo", total_env_steps=300, eval_every_steps=128, n_envs=2, seed=0, **SMALL),
        out_dir=tmp_path,
    )
    assert [p.env_steps for p in result.curve] == [0, 128, 256, 384]  # 2 envs x 64 steps per rollout
    assert result.train_env_steps == 384 and result.env_steps_per_second > 0
    assert all(len(p.episodes) == 2 and {e.task_id for e in p.episodes} == {6, 7} for p in result.curve)
    saved = json.loads((tmp_path / "result.json").read_text())
    assert saved["curve"][-1]["success_rate"] == result.final.success_rate
    assert saved["settings"]["train_tasks"][0] == {"seed": 0, "task_id": 0}
    # The saved model replays the final evaluation exactly.
    env = make_choice_env(GUESS, **SMALL)
    replay = evaluate(load_baseline(tmp_path, "maskable_ppo"), env, TASKS[6:], env_steps=0, takes_action_masks=True)
    assert replay.episodes == result.final.episodes


def test_train_baseline_random_and_bad_arguments(tmp_path):
    result = train_baseline(GUESS, TASKS, TASKS, BaselineConfig(algo="random", **SMALL), out_dir=tmp_path)
    assert len(result.curve) == 1 and result.curve[0].env_steps == 0 and result.model_path is None
    assert all(e.empty_slots == 0 for e in result.final.episodes)
    assert (tmp_path / "result.json").is_file() and not (tmp_path / "model.zip").exists()
    # The held-out side may be other data: number 12 exists only in the evaluation env.
    wider = train_baseline(
        GUESS, TASKS, [TaskSpec(0, 11)], BaselineConfig(algo="random", eval_env_kwargs={"high": 12}, max_actions=12)
    )
    assert wider.final.episodes[0].task_id == 11
    with pytest.raises(ValueError, match="maskable_ppo"):
        BaselineConfig(algo="a2c")
    with pytest.raises(ValueError, match="no saved model"):
        load_baseline(tmp_path, "random")


@pytest.mark.slow
def test_maskable_ppo_beats_random_on_guess_number(tmp_path):
    # 16 numbers, 4 guesses: bisection wins 15/16; uniformly random guessing (over the numbers
    # still possible) wins about 59%. Train and evaluate on all 16 hidden numbers.
    setup = {"env_kwargs": {"high": 16, "max_episode_steps": 4}, "max_actions": 16}
    tasks = [TaskSpec(seed=0, task_id=k) for k in range(16)]
    result = train_baseline(
        GUESS,
        tasks,
        tasks,
        BaselineConfig(algo="maskable_ppo", total_env_steps=16_000, eval_every_steps=4_000, n_envs=4, seed=0, **setup),
        out_dir=tmp_path,
    )
    env = make_choice_env(GUESS, **setup)
    random_agent = RandomAdmissibleAgent(seed=0)
    random_success = np.mean(
        [evaluate(random_agent, env, tasks, env_steps=0, takes_action_masks=True).success_rate for _ in range(10)]
    )
    # The trained policy sampled (not argmax) over the same 160 episodes: an untrained one would match random.
    model = load_baseline(tmp_path, "maskable_ppo")
    sampled_success = np.mean(
        [
            evaluate(model, env, tasks, env_steps=0, takes_action_masks=True, deterministic=False).success_rate
            for _ in range(10)
        ]
    )
    print(
        f"random {random_success:.3f}, MaskablePPO greedy {result.final.success_rate:.3f}, "
        f"sampled {sampled_success:.3f}, "
        f"{result.env_steps_per_second:.0f} env steps/s"
    )
    assert 0.5 < random_success < 0.7
    assert result.final.success_rate >= random_success + 0.15
    assert sampled_success >= random_success + 0.15


def test_benchmark_script_smoke_run(tmp_path):
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "studies" / "sb3_baselines.py"
    out = tmp_path / "sb3.json"
    done = subprocess.run(
        [
            sys.executable,
            str(script),
            "--smoke",
            "--envs",
            "guess",
            "--out",
            str(tmp_path / "runs"),
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    guess = json.loads(out.read_text())["results"]["guess"]
    assert guess["maskable_ppo"]["train_env_steps"] >= 256 and guess["random"]["success"]["mean"] > 0
