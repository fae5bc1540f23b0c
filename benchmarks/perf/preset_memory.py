"""Where a preset's run peaks in resident memory: one iteration with an evaluation before and
after it, phase by phase (seconds, resident memory on entering, peak), through the real
`Trainer` under `orsd_gym.profiling`.

`iteration_profile.py` measures the training phases of the demo's shape without evaluation;
this one takes any preset as it runs, evaluation included (a batched evaluation prefills all
its tasks' first pages at once, which can make it the run's peak). ``--evaluations 1``
evaluates only before the iteration (the same shapes, in half the evaluation time). Stopped
with Ctrl-C, it reports and writes the phases measured so far, marked ``"interrupted"``. Give
it a cached warm start to skip cloning:

    python benchmarks/perf/preset_memory.py --preset webshop_cpu \\
        --warm-start runs/cmp/warm_start/seed0.safetensors --json webshop_cpu_memory.json \\
        env.kwargs.data_dir=../shared/data/webshop eval.env_kwargs.data_dir=../shared/data/webshop
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from orsd_gym import profiling
from orsd_gym.train.config import load_config
from orsd_gym.train.evaluate import evaluate
from orsd_gym.train.trainer import Trainer


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="webshop_cpu")
    parser.add_argument("--warm-start", default=None, help="warm-start weights to load (else cloned here)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", default=None, help="write the phases to this file")
    parser.add_argument("--evaluations", type=int, choices=[1, 2], default=2, help="before (and after) the iteration")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="overrides of the preset")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="preset-memory-") as workdir:
        config = load_config(
            args.preset,
            [
                *args.overrides,
                "train.iterations=1",
                # One evaluation: this script runs it before the iteration; two: the trainer does.
                f"eval.every={args.evaluations - 1}",
                f"train.threads={args.threads}",
                f"train.output_dir={workdir}",
                f"warm_start.path={args.warm_start or Path(workdir) / 'warm_start.safetensors'}",
                "logging.live=false",
                "logging.tensorboard=false",
            ],
        )
        interrupted = False
        with profiling.profiling() as profiler:
            try:
                with profiling.phase("setup"):
                    trainer = Trainer(config)
                if args.evaluations == 1:
                    with profiling.phase("eval"):
                        evaluate(trainer.policy, trainer.envs.eval, trainer.plan, config, seed=0)
                trainer.run()
            except KeyboardInterrupt:
                interrupted = True
    profile = profiler.as_dict()
    stopped = " (interrupted: the phases measured so far)" if interrupted else ""
    print(f"{args.preset}: process peak {profile['peak_rss_gb']:.2f} GB ({profile['peak_method']}){stopped}")
    print(f"{'phase':<28}{'seconds':>10}{'entry GB':>10}{'peak GB':>10}")
    for path, stats in profile["phases"].items():
        label = "  " * path.count("/") + path.rsplit("/", 1)[-1]
        print(f"{label:<28}{stats['seconds']:>10.1f}{stats['entry_rss_gb']:>10.2f}{stats['peak_rss_gb']:>10.2f}")
    if args.json:
        record = {"args": vars(args), "interrupted": interrupted, "profile": profile}
        Path(args.json).write_text(json.dumps(record, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
