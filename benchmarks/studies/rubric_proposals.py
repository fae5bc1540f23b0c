"""Can SmolLM2-135M write rubric bundles ORSD can use? Proposal prompts and parsers, before and after.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/studies/rubric_proposals.py --json rubric_proposals.json

On the demo preset (generated ALFWorld, pick_and_place_simple, 2 receptacles, no distractors),
after its behaviour-cloning warm start (6 planner demonstrations), one batch of rollouts on
training tasks is played once and saved (``--rollouts``; the warm start too, ``--warm-start``),
so every variant below judges the SAME attempts. Each variant runs ORSD's own proposal,
verification and selection (`ORSD.prepare`) on the batch ``--repeats`` times (different
proposal sampling seeds):

* ``before``: the proposal prompt without a worked example, list items only (the old parser);
* ``example``: the worked example (another task type's bundle, as an earlier chat turn) added;
* ``parser``: no example, and the parser also takes plain lines ("Criterion: ...", sentences);
* ``after``: both (what ORSD does now).

Per variant: the fraction of proposed bundles that parse, the fraction of mixed groups with a
selected rubric, the mean selected correlation, and every parsed bundle (to read what they
say: parsing is not quality). As a reference, the expert bundle of each mixed group (written
from the planner's plan, `orsd_gym.algos.orsd.expert_rubric`) is scored by the same verifier:
its correlation with the rewards is what a right rubric gets from this verifier.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from orsd_gym import configio
from orsd_gym.algos.orsd import proposer as orsd_proposer
from orsd_gym.algos.orsd.algorithm import ORSD
from orsd_gym.algos.orsd.expert_rubric import expert_bundle_for
from orsd_gym.algos.orsd.rubrics import parse_criteria, proposal_messages, render_attempt
from orsd_gym.algos.orsd.selection import spearman
from orsd_gym.algos.orsd.verifier import Judgement, Verifier
from orsd_gym.policies.models import load_policy
from orsd_gym.probes import probes_for
from orsd_gym.rollout.trajectory import load_jsonl, save_jsonl
from orsd_gym.train.callbacks import demonstration_edit
from orsd_gym.train.config import load_config, resolve_algo
from orsd_gym.train.plan import build_task_plan
from orsd_gym.train.warm_start import ensure_warm_start

#: (worked example in the prompt, plain lines accepted by the parser) of each variant.
VARIANTS = {"before": (False, False), "example": (True, False), "parser": (False, True), "after": (True, True)}


def make_rollouts(config: Any, policy: Any, path: Path, seed: int) -> list:
    """One rollout batch on the plan's training tasks of every iteration (expert plan at reset)."""
    import gymnasium as gym

    import orsd_gym  # noqa: F401
    from orsd_gym.rollout.collector import collect

    plan = build_task_plan(config)
    kwargs = configio.merge(plan.train_kwargs, {"expert": "reset"})
    if config.env.max_episode_steps is not None:
        kwargs["max_episode_steps"] = config.env.max_episode_steps
    env = gym.make(config.env.id, **kwargs)
    cfg = config.rollout
    try:
        trajectories = collect(
            env,
            policy,
            [task.spec for tasks in plan.train for task in tasks],
            group_size=cfg.group_size,
            sampling=cfg.sampling(cfg.temperature, seed),
            options=cfg,
        )
    finally:
        env.close()
    save_jsonl(trajectories, path)
    return trajectories


@contextlib.contextmanager
def variant(example: bool, plain_lines: bool) -> Iterator[None]:
    """ORSD's proposal step with the env's worked example and the parser's plain lines switched
    as asked (the variants differ only in these two calls)."""
    saved = orsd_proposer.proposal_messages, orsd_proposer.parse_criteria
    if not example:
        orsd_proposer.proposal_messages = _without_example
    orsd_proposer.parse_criteria = functools.partial(parse_criteria, plain_lines=plain_lines)
    try:
        yield
    finally:
        orsd_proposer.proposal_messages, orsd_proposer.parse_criteria = saved


def _without_example(*args: Any, **kwargs: Any) -> list[dict[str, str]]:
    return proposal_messages(*args, **{**kwargs, "example": None})


def measure(orsd: ORSD, trajectories: list, policy: Any, repeats: int, seed: int) -> dict[str, Any]:
    groups = []
    started = time.perf_counter()
    for repeat in range(repeats):
        batch = orsd.prepare(trajectories, policy, iteration=repeat, rng=np.random.default_rng([seed, repeat]))
        groups += [dict(g, repeat=repeat) for g in batch.audit if g["no_rubric_reason"] != "all rewards equal"]
    parsed = sum(len(g["bundles"]) for g in groups)
    proposed = parsed + sum(g["malformed_bundles"] for g in groups)
    selected = [g for g in groups if g["selected"] is not None]
    return {
        "mixed_groups": len(groups),
        "bundles_proposed": proposed,
        "bundles_parsed_frac": parsed / proposed if proposed else None,
        "mean_criteria_per_parsed_bundle": (
            float(np.mean([len(b) for g in groups for b in g["bundles"]])) if parsed else None
        ),
        "mixed_groups_with_rubric_frac": len(selected) / len(groups) if groups else None,
        "mean_selected_correlation": (
            float(np.mean([g["selected_correlation"] for g in selected])) if selected else None
        ),
        "seconds": time.perf_counter() - started,
        "groups": [
            {
                key: g[key]
                for key in (
                    "repeat",
                    "task",
                    "rewards",
                    "bundles",
                    "correlations",
                    "selected",
                    "malformed_texts",
                    "no_rubric_reason",
                )
            }
            for g in groups
        ],
    }


def expert_reference(trajectories: list, orsd: ORSD, policy: Any) -> dict[str, Any]:
    """The expert bundle of each mixed group, scored by the same verifier: its correlation."""
    cfg = orsd.config
    verifier = Verifier(
        orsd.verifier,
        scoring=cfg.verifier_scoring,
        system=cfg.verifier_system,
        template=cfg.verifier_template,
        chunk_size=cfg.verifier_chunk_size,
    )
    by_episode: dict[int, Any] = {}
    for trajectory in trajectories:
        by_episode.setdefault(trajectory.episode_id, trajectory)
    groups: dict[int, list] = {}
    for trajectory in by_episode.values():
        groups.setdefault(trajectory.group_id, []).append(trajectory)
    rows = []
    for attempts in groups.values():
        rewards = [float(t.success) for t in attempts]
        if len(set(rewards)) < 2:
            continue
        bundle = expert_bundle_for(attempts[0], cfg.max_criteria)
        rendered = [
            render_attempt(t, max_obs_chars=cfg.attempt_max_obs_chars, max_steps=cfg.attempt_max_steps)
            for t in attempts
        ]
        scores = verifier.score([Judgement(attempts[0].task, a, c) for c in bundle for a in rendered])
        per_attempt = np.asarray(scores, dtype=np.float64).reshape(len(bundle), len(attempts)).mean(axis=0)
        rows.append(
            {
                "task": attempts[0].task,
                "bundle": bundle,
                "rewards": rewards,
                "scores": per_attempt.tolist(),
                "correlation": spearman(per_attempt, rewards),
            }
        )
    correlations = [r["correlation"] for r in rows if r["correlation"] is not None]
    return {
        "mixed_groups": len(rows),
        "mean_correlation": float(np.mean(correlations)) if correlations else None,
        "above_zero_frac": sum(c > 0 for c in correlations) / len(rows) if rows else None,
        "groups": rows,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", type=Path, required=True, help="write the results here")
    parser.add_argument(
        "--rollouts",
        type=Path,
        default=Path("/tmp/rubric_proposals_rollouts.jsonl"),
        help="the rollout batch (played and saved when missing)",
    )
    parser.add_argument("--warm-start", type=Path, default=Path("/tmp/rubric_proposals_warm_start.safetensors"))
    parser.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated, of {list(VARIANTS)}")
    parser.add_argument("--repeats", type=int, default=2, help="proposal rounds per variant (different seeds)")
    parser.add_argument("--bundles", type=int, default=4, help="bundles proposed per group (K)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("overrides", nargs="*", help="config overrides of the demo preset (KEY=VALUE)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    config = load_config("demo", ["algo.name=orsd", *args.overrides])
    policy = load_policy(config.model.name)
    started = time.perf_counter()
    plan = build_task_plan(config)
    edit = demonstration_edit(probes_for(config), config, len(plan.warm_start))
    ensure_warm_start(config, plan, policy, args.warm_start, edit)
    if args.rollouts.is_file():
        trajectories = load_jsonl(args.rollouts)
    else:
        trajectories = make_rollouts(config, policy, args.rollouts, args.seed)
    setup_seconds = time.perf_counter() - started
    orsd_config = dataclasses.replace(resolve_algo(config), num_bundles=args.bundles)
    orsd = ORSD(orsd_config, verifier=policy.copy_frozen())
    results: dict[str, Any] = {
        "config": {
            "preset": "demo",
            "overrides": args.overrides,
            "num_bundles": args.bundles,
            "max_criteria": orsd_config.max_criteria,
            "repeats": args.repeats,
            "seed": args.seed,
        },
        "rollouts": {
            "episodes": len({t.episode_id for t in trajectories}),
            "groups": len({t.group_id for t in trajectories}),
            "success_rate": float(np.mean([t.success for t in trajectories])),
            "setup_seconds": setup_seconds,
        },
        "variants": {},
    }
    for name in args.variants.split(","):
        with variant(*VARIANTS[name]):
            result = measure(orsd, trajectories, policy, args.repeats, args.seed)
        results["variants"][name] = result
        print(
            f"{name:>8}: parsed {result['bundles_parsed_frac']} of {result['bundles_proposed']} bundles | "
            f"mixed groups with a rubric {result['mixed_groups_with_rubric_frac']} | mean selected corr "
            f"{result['mean_selected_correlation']} | {result['seconds']:.0f} s",
            flush=True,
        )
    results["expert_reference"] = expert_reference(trajectories, orsd, policy)
    print(
        f"  expert: mean correlation {results['expert_reference']['mean_correlation']} over "
        f"{results['expert_reference']['mixed_groups']} mixed groups"
    )
    args.json.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
