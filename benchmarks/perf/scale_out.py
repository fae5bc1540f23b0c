"""Scale-out on one machine: ALFWorld env steps/s by where the envs run, and training iteration
wall time with 1 vs 2 data-parallel workers.

Envs: ``--slots`` ALFWorld envs (generated tasks) driven through the collector's slot interface
by a scripted agent (a seeded random admissible action per slot and round, so every backend
gets the same resets and actions, and must return the same observations): all in this
process, a Gymnasium async vector env (one subprocess per env), and Ray actors (``--slots``
envs over ``--actors`` actors). Resets are timed apart from steps. The backends take turns,
``--repeats`` times, and the median is kept, so a change in the machine's load (it is shared)
reaches all of them alike.

Training: ``orsd-gym train`` on GuessNumber (``--model``, default SmolLM2-135M) with
``train.workers`` 1 and then 2 (Ray Train, gloo), the same groups and settings otherwise; an
iteration's wall time is worker 0's rollout + advantages + update (it waits for the other
worker at every all-reduce). The first iteration is reported apart (warm-up).

    .venv/bin/python benchmarks/perf/scale_out.py --json scale_out.json
    .venv/bin/python benchmarks/perf/scale_out.py --model tiny-random --steps 3 --iterations 2   # smoke run
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable

import gymnasium as gym
import numpy as np

import orsd_gym  # noqa: F401  (registers the envs)
from orsd_gym.cluster import ray_session
from orsd_gym.rollout.envpool import EnvSlots, SlotPool
from orsd_gym.rollout.ray_envs import RayEnvSlots
from orsd_gym.train.config import load_config
from orsd_gym.train.launch import train
from orsd_gym.train.metrics import read_metrics

ALFWORLD = "orsd_gym/ALFWorld-v0"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slots", type=int, default=2, help="ALFWorld envs played side by side")
    parser.add_argument("--actors", type=int, default=2, help="Ray actors holding them")
    parser.add_argument("--episodes", type=int, default=2, help="episodes per slot (each one reset)")
    parser.add_argument("--steps", type=int, default=15, help="steps per episode")
    parser.add_argument("--repeats", type=int, default=3, help="turns each env backend takes (median kept)")
    parser.add_argument("--generator", default='{"num_tasks": 8}', help="JSON ALFWorld generator settings")
    parser.add_argument("--model", default="smollm2-135m", help="the policy of the training part")
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=4, help="task groups per iteration")
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--skip-training", action="store_true")
    parser.add_argument("--json", default=None, help="also write the measurements to this file")
    return parser.parse_args()


# ------------------------------------------------------------------------------------------ envs


def drive(slots: SlotPool, episodes: int, steps: int) -> dict[str, float]:
    """Reset every slot and take ``steps`` scripted steps, ``episodes`` times; seconds and a
    digest of every observation (equal across backends when they play the same game)."""
    reset_s = step_s = 0.0
    stepped = 0
    digest = hashlib.blake2b(digest_size=16)
    for episode in range(episodes):
        started = time.perf_counter()
        replies = slots.reset_many({s: (1000 * episode + s, {"task_id": s}) for s in range(slots.n)})
        reset_s += time.perf_counter() - started
        infos = {s: info for s, (_, info) in replies.items()}
        agents = {s: np.random.default_rng([episode, s]) for s in range(slots.n)}
        for _ in range(steps):
            actions = {s: str(agents[s].choice(infos[s]["admissible_actions"])) for s in infos}
            started = time.perf_counter()
            results = slots.step(actions)
            step_s += time.perf_counter() - started
            stepped += len(actions)
            for s in sorted(results):
                observation, _, terminated, truncated, info = results[s]
                digest.update(observation.encode())
                infos[s] = info
                if terminated or truncated:
                    del infos[s]
            if not infos:
                break
    return {
        "steps": stepped,
        "steps_per_s": stepped / step_s,
        "resets_per_s": episodes * slots.n / reset_s,
        "digest": digest.hexdigest(),
    }


def env_backends(args: argparse.Namespace) -> dict[str, Callable[[], SlotPool]]:
    kwargs = {"generator": json.loads(args.generator)}
    per_actor = -(-args.slots // args.actors)
    return {
        "in-process": lambda: EnvSlots(ALFWORLD, args.slots, kwargs),
        "async vector env": lambda: EnvSlots(
            gym.make_vec(ALFWORLD, num_envs=args.slots, vectorization_mode="async", **kwargs), args.slots
        ),
        "ray actors": lambda: RayEnvSlots(ALFWORLD, args.slots, kwargs, envs_per_actor=per_actor),
    }


def measure_envs(args: argparse.Namespace) -> dict[str, dict[str, float]]:
    pools = {name: make() for name, make in env_backends(args).items()}
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in pools}
    try:
        for slots in pools.values():
            drive(slots, 1, 1)  # warm-up: engine imports, first game loads
        for _ in range(args.repeats):
            for name, slots in pools.items():
                runs[name].append(drive(slots, args.episodes, args.steps))
    finally:
        for slots in pools.values():
            slots.close()
            if isinstance(slots, EnvSlots) and slots.vector is not None:
                slots.vector.close()
    if len({run["digest"] for results in runs.values() for run in results}) != 1:
        raise SystemExit("the backends returned different observations for the same resets and actions")
    out = {}
    for name, results in runs.items():
        out[name] = {
            key: statistics.median(run[key] for run in results) for key in ("steps", "steps_per_s", "resets_per_s")
        }
        out[name]["steps_per_s_runs"] = [run["steps_per_s"] for run in results]
        print(f"{name:<18} {out[name]['steps_per_s']:7.2f} steps/s  {out[name]['resets_per_s']:6.2f} resets/s")
    return out


# -------------------------------------------------------------------------------------- training


def measure_training(args: argparse.Namespace, workers: int, root: str) -> dict[str, float]:
    out_dir = os.path.join(root, f"workers{workers}")
    overrides = [
        f"model.name={args.model}",
        "env.id=orsd_gym/GuessNumber-v0",
        f"rollout.tasks_per_iteration={args.tasks}",
        f"rollout.group_size={args.group_size}",
        "rollout.max_turns=4",
        "rollout.max_new_tokens=32",
        "rollout.action_format=admissible",
        f"train.iterations={args.iterations}",
        f"train.workers={workers}",
        "train.threads=1",
        "eval.every=0",
        "eval.num_tasks=1",
        f"train.output_dir={out_dir}",
        "logging.live=false",
        "logging.tensorboard=false",
    ]
    started = time.perf_counter()
    train(load_config(None, overrides))
    total = time.perf_counter() - started
    records = read_metrics(os.path.join(out_dir, "metrics.jsonl"))
    phase_names = ("rollout", "prepare", "update")
    walls = [sum(r[f"time/{phase}"] for phase in phase_names) for r in records]
    steady = walls[1:] or walls
    phases = {phase: statistics.median(r[f"time/{phase}"] for r in records[1:] or records) for phase in phase_names}
    result = {
        "first_iteration_s": walls[0],
        "iteration_s": statistics.median(steady),
        "phases_s": phases,
        "whole_run_s": total,
        "env_steps": records[-1]["env_steps"],
    }
    first, steady_s = walls[0], result["iteration_s"]
    print(f"{workers} training worker(s): {steady_s:.1f} s/iteration (first {first:.1f} s), run {total:.0f} s")
    return result


def main() -> int:
    args = parse_args()
    started = {"load_average": os.getloadavg(), "cpus": os.cpu_count()}
    with ray_session():
        envs = measure_envs(args)
        training = {}
        if not args.skip_training:
            with tempfile.TemporaryDirectory(prefix="scale_out_") as root:
                training = {str(n): measure_training(args, n, root) for n in (1, 2)}
    base = envs["in-process"]["steps_per_s"]
    ratios = {name: result["steps_per_s"] / base for name, result in envs.items()}
    print("steps/s vs in-process: " + ", ".join(f"{name} {ratio:.2f}x" for name, ratio in ratios.items()))
    if training:
        speedup = training["1"]["iteration_s"] / training["2"]["iteration_s"]
        print(f"iteration wall time, 1 worker / 2 workers: {speedup:.2f}x")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(
                {
                    "args": vars(args),
                    "machine": {**started, "load_average_after": os.getloadavg()},
                    "envs": envs,
                    "env_ratios": ratios,
                    "training": training,
                },
                handle,
                indent=1,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
