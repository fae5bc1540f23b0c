"""Multi-turn rollout throughput: KV-cache reuse (generation sessions) vs re-encoding the whole history.

A batch of episodes plays 10 turns with smollm2-135m on CPU; each turn samples up to
``--new-tokens`` tokens and appends a fixed observation bridge. Both modes use the same seeds and
must produce the same tokens; the printed ratio is wall time(re-encode) / wall time(reuse), each
the best of ``--repeats`` alternating runs (the least disturbed, on a shared machine). Shared
prompt prefixes are off in both modes (`benchmarks/perf/shared_prefix.py` measures those).

    .venv/bin/python benchmarks/perf/rollout_kv_cache.py [--model smollm2-135m] [--episodes 4] [--turns 10] \\
        [--json out.json]
"""

from __future__ import annotations

import time

import _side_by_side as side_by_side

from orsd_gym.policies.base import SamplingParams
from orsd_gym.profiling import profiling
from orsd_gym.rollout.episode import SequenceEpisode

OBSERVATION = (
    "You arrive at cabinet 3. On the cabinet 3, you see a soapbottle 2, a spraybottle 1 and a toiletpaper 1. "
    "Admissible actions: go to countertop 1 | open cabinet 3 | take soapbottle 2 from cabinet 3 | look | inventory"
)
SYSTEM = "You are a household agent. Answer with one action."


def distinct_prompts(episodes: int) -> list[list[dict[str, str]]]:
    """One prompt per episode (each names its episode, so no two share more than the system prompt)."""
    return [
        [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": f"Episode {i}. Your task is to: put a soapbottle in toilet.\n" + OBSERVATION},
        ]
        for i in range(episodes)
    ]


def play(
    policy, prompts: list[list[dict[str, str]]], turns: int, new_tokens: int, reuse: bool
) -> tuple[float, list[list[int]], int]:
    """Play every prompt's episode for ``turns`` turns; returns (seconds, final token sequences,
    context tokens encoded)."""
    builders = [SequenceEpisode(policy.chat, messages) for messages in prompts]
    sessions = [policy.new_session() for _ in builders] if reuse else None
    start = time.perf_counter()
    with profiling() as profiler:
        for turn in range(turns):
            params = SamplingParams(max_new_tokens=new_tokens, seed=turn)
            outs = policy.generate([b.context() for b in builders], params, sessions=sessions)
            for builder, out in zip(builders, outs, strict=True):
                builder.add_model_turn(out)
                builder.add_observation(OBSERVATION)
    seconds = time.perf_counter() - start
    return seconds, [b.context() for b in builders], int(profiler.counters["prefill_tokens"])


def main() -> None:
    parser = side_by_side.parser(__doc__.splitlines()[0], repeats=2)
    parser.add_argument("--episodes", type=int, default=4)
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--new-tokens", type=int, default=16)
    args = parser.parse_args()
    policy = side_by_side.load(args)
    policy.share_prefixes = False
    prompts = distinct_prompts(args.episodes)
    play(policy, prompts[:1], 1, 2, True)  # warm-up
    runs = side_by_side.alternate(
        ["reuse", "re-encode"],
        lambda mode: play(policy, prompts, args.turns, args.new_tokens, mode == "reuse"),
        args.repeats,
    )
    best = {mode: min(results, key=lambda r: r[0]) for mode, results in runs.items()}
    same = all(r[1] == runs["reuse"][0][1] for results in runs.values() for r in results)
    final = sum(len(t) for t in best["reuse"][1]) / len(best["reuse"][1])
    ratio = best["re-encode"][0] / best["reuse"][0]
    print(
        f"model={args.model} episodes={args.episodes} turns={args.turns} new_tokens/turn<={args.new_tokens} "
        f"final length~{final:.0f} tokens, best of {args.repeats}"
    )
    print(f"re-encode full history: {best['re-encode'][0]:7.2f} s  ({best['re-encode'][2]} context tokens encoded)")
    print(f"KV-cache reuse:         {best['reuse'][0]:7.2f} s  ({best['reuse'][2]} context tokens encoded)")
    print(f"speed-up ratio: {ratio:.2f}x   identical tokens: {same}")
    side_by_side.write_record(
        args,
        {
            "seconds": {mode: [r[0] for r in results] for mode, results in runs.items()},
            "encoded_tokens": {mode: r[2] for mode, r in best.items()},
            "final_length": final,
            "ratio": ratio,
            "identical_tokens": same,
        },
    )


if __name__ == "__main__":
    main()
