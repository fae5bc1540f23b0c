"""Where ORSD's credit goes inside the actions: decision tokens vs tokens the policy is sure of.

Reads the audits of a comparison's ORSD runs (``compare`` / ``orsd_study.py`` output; the env
must have reported the expert's next action, ``expert: true``) and splits every action token
of a shaped trajectory by the probability the policy sampled it with: tokens above
``--sure`` (0.9) are ones a warm-started policy would write anyway ("go to", digits, the end of
a name it has started), the rest are its *decisions* (which receptacle, which object). Per run:

* how many tokens are decisions, and credit alignment (`orsd_gym.algos.orsd.alignment`) on all
  tokens and on the decisions alone, with its standard error: a delta of a sure token is near 0
  (a rubric cannot raise p above 1), so the alignment of all tokens is an average in which ~95%
  of the terms are ~0 and a few dozen decisions decide the sign;
* on the decisions, mean delta of the tokens that also occur in the selected rubric's text vs
  those that do not, agreeing and other actions apart: a model that follows the rubric's
  process raises the agreeing ones; a model that copies the rubric's words raises whatever the
  rubric mentions, agreeing or not.

    python benchmarks/studies/credit_decision_tokens.py COMPARISON_DIR [--sure 0.9] [--json PATH] [--examples N]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

from orsd_gym.algos.orsd.alignment import expert_next_action, model_action_spans, same_action
from orsd_gym.policies.models import load_tokenizer
from orsd_gym.rollout.trajectory import load_jsonl


def decision_rows(run_dir: Path, tokenizer, sure: float) -> list[dict]:
    """One row per loss token of an action (with a known expert action) of a shaped trajectory."""
    rows = []
    for iteration in sorted((run_dir / "audit").glob("iter_*")):
        trajectories = load_jsonl(iteration / "trajectories.jsonl")
        deltas = json.loads((iteration / "token_extras.json").read_text())["orsd_delta"]
        for group in json.loads((iteration / "groups.json").read_text()):
            if group.get("selected") is None:
                continue
            rubric = " ".join(group["selected_rubric"]).lower()
            for index in group["trajectory_indices"]:
                trajectory, delta = trajectories[index], deltas[index]
                for step, span in model_action_spans(trajectory):
                    expert = expert_next_action(trajectory, step)
                    if expert is None:
                        continue
                    for k in range(span.start, span.end):
                        if not trajectory.loss_mask[k]:
                            continue
                        text = tokenizer.decode([trajectory.token_ids[k]]).strip().lower()
                        rows.append(
                            {
                                "agree": same_action(trajectory.actions[step], expert),
                                "decision": math.exp(trajectory.logprobs[k]) <= sure,
                                "in_rubric": len(text) >= 3 and text in rubric,
                                "delta": float(delta[k]),
                                "token": text,
                                "action": trajectory.actions[step],
                                "expert": expert,
                            }
                        )
    return rows


def _mean(rows: list[dict]) -> float | None:
    return float(np.mean([r["delta"] for r in rows])) if rows else None


def _gap(agree: float | None, other: float | None) -> float | None:
    return None if agree is None or other is None else agree - other


def _gap_se(agree: list[dict], other: list[dict]) -> float | None:
    """Standard error of the difference of the two means (Welch), None below 2 tokens a side."""
    if len(agree) < 2 or len(other) < 2:
        return None
    variances = [np.var([r["delta"] for r in side], ddof=1) / len(side) for side in (agree, other)]
    return float(math.sqrt(sum(variances)))


def summarise(rows: list[dict]) -> dict:
    decisions = [r for r in rows if r["decision"]]

    def side(subset, agree):
        return [r for r in subset if r["agree"] == agree]

    summary = {
        "tokens": len(rows),
        "decision_tokens": len(decisions),
        "decision_share": len(decisions) / len(rows) if rows else None,
        "alignment_all": _gap(_mean(side(rows, True)), _mean(side(rows, False))),
        "alignment_decisions": _gap(_mean(side(decisions, True)), _mean(side(decisions, False))),
        "alignment_decisions_se": _gap_se(side(decisions, True), side(decisions, False)),
        "sure_mean_abs_delta": float(np.mean([abs(r["delta"]) for r in rows if not r["decision"]]))
        if len(decisions) < len(rows)
        else None,
    }
    for agree, name in ((True, "agree"), (False, "other")):
        for in_rubric, where in ((True, "in_rubric"), (False, "not_in_rubric")):
            subset = [r for r in side(decisions, agree) if r["in_rubric"] == in_rubric]
            summary[f"{name}_{where}_delta"] = _mean(subset)
            summary[f"{name}_{where}_n"] = len(subset)
    return summary


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:+.3f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("comparison", type=Path, help="a compare output directory (holds runs/)")
    parser.add_argument("--sure", type=float, default=0.9, help="sampling probability above which a token is 'sure'")
    parser.add_argument("--examples", type=int, default=0, help="print this many largest |delta| decisions per run")
    parser.add_argument("--json", type=Path, help="write the per-run summaries here")
    args = parser.parse_args()
    runs = sorted(p for p in (args.comparison / "runs").glob("orsd*") if (p / "audit").is_dir())
    if not runs:
        print(f"no ORSD run with audits under {args.comparison / 'runs'}", file=sys.stderr)
        return 2
    base = json.loads((args.comparison / "compare_config.yaml").read_text())["base"]
    tokenizer = load_tokenizer(base["model"]["name"])
    summaries = {}
    print(
        "| run | action tokens | decisions | alignment (all) | alignment (decisions) +- SE | mean abs delta, sure | "
        "agreeing decisions: in rubric / not | other decisions: in rubric / not |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for run in runs:
        rows = decision_rows(run, tokenizer, args.sure)
        s = summaries[run.name] = summarise(rows)
        if not rows:
            print(f"| {run.name} | 0 | | | | | | |")
            continue
        print(
            f"| {run.name} | {s['tokens']} | {s['decision_tokens']} ({s['decision_share']:.0%}) | "
            f"{_fmt(s['alignment_all'])} | "
            f"{_fmt(s['alignment_decisions'])} +- {s['alignment_decisions_se'] or 0:.3f} | "
            f"{s['sure_mean_abs_delta'] or 0:.4f} | "
            f"{_fmt(s['agree_in_rubric_delta'])} (n={s['agree_in_rubric_n']}) / "
            f"{_fmt(s['agree_not_in_rubric_delta'])} (n={s['agree_not_in_rubric_n']}) | "
            f"{_fmt(s['other_in_rubric_delta'])} (n={s['other_in_rubric_n']}) / "
            f"{_fmt(s['other_not_in_rubric_delta'])} (n={s['other_not_in_rubric_n']}) |"
        )
        for r in sorted((r for r in rows if r["decision"]), key=lambda r: -abs(r["delta"]))[: args.examples]:
            side = "agrees" if r["agree"] else "other"
            print(f"    {r['delta']:+.3f} {r['token']!r} in {r['action']!r} ({side}; expert: {r['expert']!r})")
    if args.json:
        args.json.write_text(json.dumps({"sure": args.sure, "runs": summaries}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
