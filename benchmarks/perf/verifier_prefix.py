"""ORSD's verification with shared prefixes vs without: every criterion asked about every attempt.

A group of ``--attempts`` ALFWorld-like attempts (rendered as ORSD renders them, about
``--attempt-lines`` actions each) is judged against ``--criteria`` criteria (K bundles x M
criteria), one question per (attempt, criterion) pair, exactly as `Verifier.score` asks them.
With shared prefixes the questions about one attempt encode the task and the attempt once;
without, every question encodes them. Same questions, scores checked equal; the ratio is wall
time(without) / wall time(with), best of ``--repeats`` alternating runs each; each mode's
largest growth of resident memory while verifying is printed too (``--verifier-dtype bfloat16``
for a bf16 verifier).

    .venv/bin/python benchmarks/perf/verifier_prefix.py [--attempts 4] [--criteria 12] [--json out.json]
"""

from __future__ import annotations

import time

import _side_by_side as side_by_side
import numpy as np

from orsd_gym.algos.orsd.verifier import Judgement, Verifier
from orsd_gym.allocator import return_freed_memory
from orsd_gym.profiling import phase, profiling

TASK = "put a clean soapbar in countertop."
PLACES = ["cabinet 1", "countertop 1", "sinkbasin 1", "drawer 2", "shelf 3", "toilet 1", "bathtubbasin 1"]
CRITERIA = [
    "Goes to the place where the soapbar is.",
    "Takes the soapbar before cleaning it.",
    "Cleans the soapbar at the sinkbasin.",
    "Puts the clean soapbar on the countertop.",
    "Does not open receptacles it does not need.",
    "Checks the countertop before putting the soapbar down.",
]


def attempt(index: int, lines: int) -> str:
    """A rendered attempt: numbered actions with short observations, different per attempt."""
    steps = []
    for turn in range(lines):
        place = PLACES[(turn * (index + 2)) % len(PLACES)]
        steps.append(f"{turn + 1}. > go to {place}\n   You arrive at {place}. On the {place}, you see nothing.")
    return "\n".join(steps)


def main() -> None:
    parser = side_by_side.parser(__doc__.splitlines()[0], repeats=3)
    parser.add_argument("--attempts", type=int, default=4, help="G: attempts in the group")
    parser.add_argument("--criteria", type=int, default=12, help="K x M: criteria asked about each attempt")
    parser.add_argument("--attempt-lines", type=int, default=8, help="actions per rendered attempt")
    parser.add_argument("--verifier-dtype", default=None, help="the verifier's dtype (model.verifier_dtype)")
    args = parser.parse_args()
    return_freed_memory()  # as the trainer runs: resident memory then tracks what is live
    policy = side_by_side.load(args).copy_frozen(args.verifier_dtype)
    verifier = Verifier(policy)
    criteria = [
        CRITERIA[k % len(CRITERIA)] + ("" if k < len(CRITERIA) else f" (check {k})") for k in range(args.criteria)
    ]
    rendered = [attempt(g, args.attempt_lines) for g in range(args.attempts)]
    # ORSD's order: bundle, criterion, attempt.
    judgements = [Judgement(TASK, a, c) for c in criteria for a in rendered]
    verifier.score(judgements[:2])  # warm-up

    def judge(mode: str) -> tuple[float, np.ndarray, float]:
        policy.share_prefixes = mode == "shared"
        with profiling() as profiler, phase("verify"):
            start = time.perf_counter()
            scores = verifier.score(judgements)
            seconds = time.perf_counter() - start
        stats = profiler.as_dict()["phases"]["verify"]
        return seconds, scores, stats["peak_rss_gb"] - stats["entry_rss_gb"]

    runs = side_by_side.alternate(["shared", "separate"], judge, args.repeats)
    best = {mode: min(r[0] for r in results) for mode, results in runs.items()}
    growth = {mode: max(r[2] for r in results) for mode, results in runs.items()}
    gap = max(float(np.abs(r[1] - runs["shared"][0][1]).max()) for results in runs.values() for r in results)
    lengths = [len(verifier.context(j)) for j in judgements]
    ratio = best["separate"] / best["shared"]
    print(
        f"model={args.model} {args.attempts} attempts x {args.criteria} criteria = {len(judgements)} questions "
        f"of {min(lengths)}-{max(lengths)} tokens, verifier {policy.dtype}, best of {args.repeats}"
    )
    for mode in runs:
        print(f"{mode:>8} prefixes: {best[mode]:7.2f} s, resident memory +{growth[mode]:.2f} GB at most")
    print(f"speed-up ratio: {ratio:.2f}x   largest score difference: {gap:.1e}")
    side_by_side.write_record(
        args,
        {
            "questions": len(judgements),
            "question_tokens": [min(lengths), max(lengths)],
            "seconds": {mode: [r[0] for r in results] for mode, results in runs.items()},
            "peak_growth_gb": growth,
            "ratio": ratio,
            "largest_score_difference": gap,
        },
    )


if __name__ == "__main__":
    main()
