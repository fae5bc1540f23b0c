"""Multi-turn rollout throughput: KV-cache reuse (generation sessions) vs re-encoding the whole history.

A batch of episodes plays 10 turns with smollm2-135m on CPU; each turn samples up to
``--new-tokens`` tokens and appends a fixed observation bridge. Both modes use the same seeds and
must produce the same tokens; the printed ratio is wall time(re-encode) / wall time(reuse).

    .venv/bin/python benchmarks/rollout_kv_cache.py [--model smollm2-135m] [--episodes 4] [--turns 10]
"""

from __future__ import annotations

import argparse
import time

import torch

from orsd_gym.policies.base import SamplingParams
from orsd_gym.policies.models import load_policy
from orsd_gym.rollout.episode import SequenceEpisode

OBSERVATION = (
    "You arrive at cabinet 3. On the cabinet 3, you see a soapbottle 2, a spraybottle 1 and a toiletpaper 1. "
    "Admissible actions: go to countertop 1 | open cabinet 3 | take soapbottle 2 from cabinet 3 | look | inventory"
)


def play(policy, episodes: int, turns: int, new_tokens: int, reuse: bool) -> tuple[float, list[list[int]], int]:
    builders = [
        SequenceEpisode(
            policy.chat,
            [
                {"role": "system", "content": "You are a household agent. Answer with one action."},
                {
                    "role": "user",
                    "content": f"Episode {i}. Your task is to: put a soapbottle in toilet.\n" + OBSERVATION,
                },
            ],
        )
        for i in range(episodes)
    ]
    sessions = [policy.new_session() for _ in builders] if reuse else None
    encoded = 0
    start = time.perf_counter()
    for turn in range(turns):
        params = SamplingParams(max_new_tokens=new_tokens, seed=turn)
        contexts = [b.context() for b in builders]
        outs = policy.generate(contexts, params, sessions=sessions)
        for builder, ctx, out in zip(builders, contexts, outs, strict=True):
            encoded += len(ctx) - out.extra["reused_prefix_tokens"]
            builder.add_model_turn(out)
            builder.add_observation(OBSERVATION)
    return time.perf_counter() - start, [b.context() for b in builders], encoded


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--episodes", type=int, default=4)
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--new-tokens", type=int, default=16)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    policy = load_policy(args.model)
    play(policy, 1, 1, 2, True)  # warm-up
    t_reuse, tokens_reuse, enc_reuse = play(policy, args.episodes, args.turns, args.new_tokens, True)
    t_full, tokens_full, enc_full = play(policy, args.episodes, args.turns, args.new_tokens, False)
    same = tokens_reuse == tokens_full
    final = sum(len(t) for t in tokens_full) / len(tokens_full)
    print(
        f"model={args.model} episodes={args.episodes} turns={args.turns} new_tokens/turn<={args.new_tokens} "
        f"final length~{final:.0f} tokens"
    )
    print(f"re-encode full history: {t_full:7.2f} s  ({enc_full} context tokens encoded)")
    print(f"KV-cache reuse:         {t_reuse:7.2f} s  ({enc_reuse} context tokens encoded)")
    print(f"speed-up ratio: {t_full / t_reuse:.2f}x   identical tokens: {same}")


if __name__ == "__main__":
    main()
