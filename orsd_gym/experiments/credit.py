"""Token-level credit of a training iteration (what ``orsd-gym inspect`` shows).

Reads what the trainer audits each iteration (``RUN_DIR/audit/iter_N/``: trajectories, the
per-token series and the per-group records) and shows one trajectory with every
model-generated token coloured by one per-token series (green above 0, red below): by default
the first the algorithm recorded beside the advantages (ORSD's delta, GiGPO's step advantage),
or any series by name (``advantages``: the per-token advantage itself). Beside it: the GRPO
advantage, the rubric of the trajectory's group where the algorithm chose one, and the prompt
and observations greyed out; in the terminal (rich) and as a standalone HTML file.
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.text import Text

from orsd_gym.errors import AuditNotFoundError
from orsd_gym.rollout.trajectory import Trajectory, load_jsonl

#: Series of an audit that are not an algorithm's own (what `PreparedBatch.inspection` adds).
_COMMON_SERIES = ("advantages", "grpo_advantage", "ref_logprobs")


@dataclass
class TokenCredit:
    text: str
    kind: str  # "prompt" | "model" | "env"
    advantage: float | None
    #: The token's value of the series the view is coloured by (None: not a sampled token).
    delta: float | None


@dataclass
class CreditView:
    trajectory: Trajectory
    tokens: list[TokenCredit]
    group: dict[str, Any] | None
    grpo_advantage: float | None
    #: The name of the per-token series the tokens are coloured by.
    shading: str = "orsd_delta"

    @property
    def has_rubric(self) -> bool:
        """The algorithm chooses rubrics (ORSD): its group records say which, if any."""
        return bool(self.group) and ("selected_rubric" in self.group or "rubric" in self.group)

    @property
    def rubric(self) -> Any:
        if not self.group:
            return None
        return self.group.get("selected_rubric", self.group.get("rubric"))


def audit_dir(run_dir: str | Path, iteration: int) -> Path:
    path = Path(run_dir) / "audit" / f"iter_{iteration:06d}"
    if not path.is_dir():
        available = (
            sorted(p.name for p in (Path(run_dir) / "audit").glob("iter_*"))
            if (Path(run_dir) / "audit").is_dir()
            else []
        )
        raise AuditNotFoundError(
            f"no audit for iteration {iteration} in {run_dir} (available: {', '.join(available) or 'none'})"
        )
    return path


def load_credit(
    run_dir: str | Path, iteration: int, index: int, tokenizer: Any, colour_by: str | None = None
) -> CreditView:
    """Token-level credit of trajectory ``index`` of iteration ``iteration`` of a run, coloured by
    the audit's series ``colour_by`` (default: `default_shading`)."""
    directory = audit_dir(run_dir, iteration)
    trajectories = load_jsonl(directory / "trajectories.jsonl")
    if not 0 <= index < len(trajectories):
        raise AuditNotFoundError(
            f"iteration {iteration} has {len(trajectories)} trajectories; --trajectory {index} is out of range"
        )
    extras = json.loads((directory / "token_extras.json").read_text())
    groups = json.loads((directory / "groups.json").read_text())
    shading = colour_by or default_shading(extras)
    if shading not in extras:
        raise AuditNotFoundError(
            f"iteration {iteration} recorded no per-token series {shading!r} (it has: {', '.join(extras)})"
        )
    return credit_view(
        trajectories[index],
        tokenizer,
        advantages=_row(extras, "advantages", index),
        delta=_row(extras, shading, index),
        grpo_advantage=_row(extras, "grpo_advantage", index),
        groups=groups,
        shading=shading,
    )


def default_shading(extras: dict[str, list]) -> str:
    """The series a view is coloured by unless told: the first the algorithm recorded of its own
    (ORSD's ``orsd_delta``, GiGPO's ``gigpo_step_advantage``), else the advantages themselves."""
    return next((name for name in extras if name not in _COMMON_SERIES), "advantages")


def _row(extras: dict[str, list], key: str, index: int) -> list[float] | None:
    rows = extras.get(key)
    return None if rows is None else rows[index]


def credit_view(
    trajectory: Trajectory,
    tokenizer: Any,
    *,
    advantages: Sequence[float] | None = None,
    delta: Sequence[float] | None = None,
    grpo_advantage: Sequence[float] | None = None,
    groups: Sequence[dict[str, Any]] = (),
    shading: str = "orsd_delta",
) -> CreditView:
    """Credit view of one trajectory from per-token rows (lists or tensors aligned with its tokens)
    and the algorithm's per-group audit records (to find the rubric of its group); ``delta`` is
    the row the tokens are coloured by, the series named ``shading`` (ORSD's delta by default)."""
    advantages, delta, grpo_advantage = (_as_list(v) for v in (advantages, delta, grpo_advantage))
    kinds = ["prompt"] * len(trajectory.token_ids)
    for span in trajectory.spans:
        for t in range(span.start, span.end):
            kinds[t] = span.kind
    pieces = tokenizer.convert_ids_to_tokens(trajectory.token_ids)
    tokens = []
    for t, piece in enumerate(pieces):
        learn = trajectory.loss_mask[t] == 1
        tokens.append(
            TokenCredit(
                text=tokenizer.convert_tokens_to_string([piece]),
                kind=kinds[t],
                advantage=advantages[t] if advantages is not None and learn else None,
                delta=delta[t] if delta is not None and learn else None,
            )
        )
    # The GRPO advantage is one value per sequence; without a correction it is the advantage itself.
    source = grpo_advantage if grpo_advantage is not None else (advantages if delta is None else None)
    first = next((t for t, m in enumerate(trajectory.loss_mask) if m), None)
    grpo_value = source[first] if source is not None and first is not None else None
    group = next((g for g in groups if g.get("group_id") == trajectory.group_id), None)
    return CreditView(trajectory, tokens, group, grpo_value, shading)


def _as_list(values: Any) -> list[float] | None:
    if values is None:
        return None
    return values.tolist() if hasattr(values, "tolist") else list(values)


def _scale(view: CreditView) -> float:
    values = [abs(t.delta) for t in view.tokens if t.delta is not None]
    return max(values) if values and max(values) > 0 else 1.0


def render_terminal(view: CreditView, console: Any) -> None:
    traj = view.trajectory
    console.print(
        f"[bold]task[/bold] {traj.task}  [dim](task {traj.task_id}, seed {traj.seed}, group {traj.group_id})[/dim]"
    )
    console.print(
        f"reward {traj.episode_return:.3f}, success {traj.success}, GRPO advantage "
        f"{view.grpo_advantage if view.grpo_advantage is not None else 'n/a'}"
    )
    if view.has_rubric:
        console.print(
            f"[bold]rubric[/bold] {json.dumps(view.rubric) if view.rubric else '(none selected: zero correction)'}"
        )
    console.print(f"[dim]model tokens coloured by {view.shading}: green above 0, red below[/dim]")
    scale = _scale(view)
    text = Text()
    for token in view.tokens:
        if token.kind != "model":
            text.append(token.text, style="grey50")
        elif token.delta is None:
            text.append(token.text, style="bold")
        else:
            strength = min(1.0, abs(token.delta) / scale)
            level = int(60 + 195 * strength)
            colour = f"rgb(0,{level},0)" if token.delta >= 0 else f"rgb({level},0,0)"
            text.append(token.text, style=f"bold white on {colour}")
    console.print(text)


def render_html(view: CreditView) -> str:
    traj = view.trajectory
    scale = _scale(view)
    spans = []
    for token in view.tokens:
        content = html.escape(token.text).replace("\n", "<br>")
        if token.kind != "model":
            spans.append(f'<span class="obs">{content}</span>')
            continue
        title = f"advantage {token.advantage:.4f}" if token.advantage is not None else "advantage n/a"
        if token.delta is None:
            spans.append(f'<span class="tok" title="{title}">{content}</span>')
            continue
        strength = min(1.0, abs(token.delta) / scale)
        colour = f"rgba(0,160,0,{strength:.2f})" if token.delta >= 0 else f"rgba(200,0,0,{strength:.2f})"
        title += f"; {view.shading} {token.delta:+.4f}"
        spans.append(f'<span class="tok" style="background:{colour}" title="{html.escape(title)}">{content}</span>')
    rubric_html = _rubric_html(view)
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>orsd-gym credit: task {traj.task_id}</title>
<style>
body {{ font-family: system-ui, sans-serif; max-width: 70em; margin: 2em auto; }}
.seq {{ font-family: ui-monospace, monospace; white-space: pre-wrap; line-height: 1.6;
        border: 1px solid #ddd; padding: 1em; }}
.obs {{ color: #999; }}
.tok {{ font-weight: 600; border-radius: 2px; }}
</style></head><body>
<h2>{html.escape(traj.task)}</h2>
<p>env {html.escape(traj.env_id)}, task {traj.task_id}, seed {traj.seed}, group {traj.group_id};
reward {traj.episode_return:.3f}, success {traj.success};
GRPO advantage {view.grpo_advantage if view.grpo_advantage is not None else "n/a"}</p>
{rubric_html}
<p>Model tokens coloured by {html.escape(view.shading)}: green above 0, red below (hover for values).
Prompt and observations are grey.</p>
<div class="seq">{"".join(spans)}</div>
</body></html>
"""


def _rubric_html(view: CreditView) -> str:
    """The rubric section (only for an algorithm that chooses rubrics)."""
    if not view.has_rubric:
        return ""
    rubric = view.rubric
    body = (
        "<ol>" + "".join(f"<li>{html.escape(str(c))}</li>" for c in rubric) + "</ol>"
        if isinstance(rubric, list)
        else html.escape(str(rubric or "(none selected: zero correction)"))
    )
    return f"<h3>Rubric</h3>{body}"
