"""The update's forward and backward in float32 vs bfloat16 (``model.update_dtype``), side by side,
at the shape of a `webshop_cpu` update: per-step samples of one page each (lengths drawn from
180 to 810 tokens, as that preset's pages), the last 15 tokens of each sampled, SmolLM2-135M with
the preset's LoRA. Weights stay float32 in both modes; bfloat16 computes the pass through
autocast. The modes alternate ``--repeats`` times (the best of each is compared), and the
record says how far apart the two modes' losses and gradients are.

    .venv/bin/python benchmarks/perf/update_dtype.py --rows 16 --json benchmarks/results/perf/update_dtype.json
"""

from __future__ import annotations

import os
import time

import numpy as np
import torch
from _side_by_side import alternate, parser, write_record

from orsd_gym.policies.models import load_policy
from orsd_gym.policies.settings import PolicySettings
from orsd_gym.train.config import load_config

MODES = ("float32", "bfloat16")
SAMPLED = 15


def rows(count: int, vocab: int, seed: int) -> tuple[list[list[int]], list[list[int]]]:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(180, 811, size=count)
    sequences = [rng.integers(0, vocab, size=int(n)).tolist() for n in lengths]
    masks = [[0] * (len(s) - SAMPLED) + [1] * SAMPLED for s in sequences]
    return sequences, masks


def main(argv: list[str] | None = None) -> int:
    cli = parser("the update's pass in float32 vs bfloat16, side by side", repeats=2)
    cli.add_argument("--rows", type=int, default=16, help="samples in the update (webshop_cpu's iteration: ~126)")
    args = cli.parse_args(argv)
    torch.set_num_threads(args.threads)
    preset = load_config("webshop_cpu")
    settings = PolicySettings(token_budget=preset.optim.micro_batch_tokens)
    lora = preset.model.lora.settings()
    policies = {mode: load_policy(args.model, lora=lora, update_dtype=mode, settings=settings) for mode in MODES}
    policies["bfloat16"].load_state_dict(policies["float32"].state_dict())  # the same LoRA weights
    sequences, masks = rows(args.rows, policies["float32"].vocab_size, seed=0)

    def one_pass(mode: str) -> dict:
        policy = policies[mode]
        policy.set_training(True)
        for parameter in policy.trainable_parameters():
            parameter.grad = None
        started = time.perf_counter()
        logps = policy.score(sequences, masks, with_grad=True)
        loss = -sum(lp.sum() for lp in logps) / (SAMPLED * len(sequences))
        loss.backward()
        seconds = time.perf_counter() - started
        policy.set_training(False)
        grads = torch.cat([p.grad.flatten() for p in policy.trainable_parameters()])
        return {"seconds": seconds, "loss": loss.item(), "grads": grads}

    runs = alternate(MODES, one_pass, args.repeats)
    best = {mode: min(r["seconds"] for r in runs[mode]) for mode in MODES}
    g32, g16 = runs["float32"][-1]["grads"], runs["bfloat16"][-1]["grads"]
    record = {
        "rows": args.rows,
        "tokens": sum(len(s) for s in sequences),
        "load_average": os.getloadavg(),
        "seconds": {mode: [r["seconds"] for r in runs[mode]] for mode in MODES},
        "speedup_bfloat16": best["float32"] / best["bfloat16"],
        "loss": {mode: runs[mode][-1]["loss"] for mode in MODES},
        "gradient_cosine": float(torch.nn.functional.cosine_similarity(g32, g16, dim=0)),
        "gradient_relative_difference": float((g16 - g32).norm() / g32.norm()),
    }
    for mode in MODES:
        print(f"{mode}: best {best[mode]:.1f} s of {[round(r['seconds'], 1) for r in runs[mode]]}")
    print(
        f"bfloat16 / float32 speed: {record['speedup_bfloat16']:.2f}x; loss {record['loss']['float32']:.5f} vs "
        f"{record['loss']['bfloat16']:.5f}; gradient cosine {record['gradient_cosine']:.5f}, relative difference "
        f"{record['gradient_relative_difference']:.4f}; load average {record['load_average']}"
    )
    write_record(args, record)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
