"""`HFPolicy.score` (micro-batched, chunked LM head, mask-aware) vs a naive full-batch forward.

Scores ``--seqs`` sequences of ``--length`` tokens in which a quarter of the tokens are
"model" tokens (loss mask 1), as in a multi-turn trajectory. Each mode runs in its own process
so the peak RSS (ru_maxrss) is that mode's. Prints tokens/s, peak memory and the ratios.

    .venv/bin/python benchmarks/perf/policy_score.py [--model smollm2-135m] [--seqs 8] [--length 1024]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

import torch


def _work(model: str, seqs: int, length: int, mode: str) -> dict:
    from orsd_gym.policies.models import load_policy

    torch.set_num_threads(2)
    policy = load_policy(model)
    generator = torch.Generator().manual_seed(0)
    sequences = torch.randint(0, policy.vocab_size, (seqs, length), generator=generator).tolist()
    masks = [[1 if (t // 64) % 4 == 3 else 0 for t in range(length)] for _ in range(seqs)]
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    with torch.no_grad():
        if mode == "score":
            out = policy.score(sequences, masks)
            checksum = float(sum((s * torch.tensor(m)).sum() for s, m in zip(out, masks, strict=True)))
        else:
            ids = torch.tensor(sequences)
            logits = policy.model(input_ids=ids).logits.float()
            logp = torch.log_softmax(logits[:, :-1], dim=-1).gather(-1, ids[:, 1:, None]).squeeze(-1)
            checksum = float((logp * torch.tensor(masks)[:, 1:]).sum())
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"seconds": seconds, "peak_mb": peak / 1024, "delta_mb": (peak - base) / 1024, "checksum": checksum}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--seqs", type=int, default=8)
    parser.add_argument("--length", type=int, default=1024)
    parser.add_argument("--json", default=None, help="write the figures here")
    parser.add_argument("--_mode", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args._mode:
        print(json.dumps(_work(args.model, args.seqs, args.length, args._mode)))
        return
    results = {}
    for mode in ("naive", "score"):
        cmd = [
            sys.executable,
            __file__,
            "--model",
            args.model,
            "--seqs",
            str(args.seqs),
            "--length",
            str(args.length),
            "--_mode",
            mode,
        ]
        results[mode] = json.loads(
            subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.splitlines()[-1]
        )
    tokens = args.seqs * args.length
    for mode, r in results.items():
        print(
            f"{mode:6s}: {tokens / r['seconds']:8.0f} tokens/s  peak RSS {r['peak_mb']:7.0f} MB "
            f"(+{r['delta_mb']:.0f} MB while scoring)  checksum {r['checksum']:.3f}"
        )
    speed = results["naive"]["seconds"] / results["score"]["seconds"]
    memory = results["naive"]["delta_mb"] / max(results["score"]["delta_mb"], 1)
    print(f"throughput ratio score/naive: {speed:.2f}x   memory growth ratio naive/score: {memory:.2f}x")
    if args.json:
        record = {"args": vars(args), "results": results, "speed_ratio": speed, "memory_ratio": memory}
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(record, handle, indent=1)


if __name__ == "__main__":
    main()
