"""`benchmarks/perf/vs_trl.py`: the same GRPO work in orsd-gym and TRL, run at tiny size."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "perf" / "vs_trl.py"
TINY = ["--model", "tiny-random", "--prompts", "2", "--group", "2", "--max-new-tokens", "8", "--threads", "1"]


def _module():
    spec = importlib.util.spec_from_file_location("vs_trl", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_trl_is_shown_the_chats_orsd_gym_plays():
    """TRL's prompts are the plan's training tasks, in order, as orsd-gym's rollout renders them."""
    from orsd_gym.policies.models import load_policy
    from orsd_gym.rollout import EnvSetup, RolloutOptions, collect
    from orsd_gym.train.plan import build_task_plan

    vs_trl = _module()
    args = vs_trl.parse_args([*TINY, "--iterations", "2"])
    rows, kwargs = vs_trl._trl_prompts(args)
    plan = build_task_plan(vs_trl._config(args, "unused"))
    assert [row["task_id"] for row in rows] == [task.task_id for tasks in plan.train for task in tasks]
    played = collect(
        EnvSetup(vs_trl.ENV_ID, kwargs),
        load_policy("tiny-random"),
        [plan.train[0][0].spec],
        group_size=1,
        options=RolloutOptions(max_turns=1, action_format="last_line"),
    )[0]
    assert played.prompt_messages == rows[0]["prompt"]


@pytest.mark.slow
def test_vs_trl_runs_at_tiny_size(tmp_path):
    out = tmp_path / "vs_trl.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *TINY, "--iterations", "2", "--repeats", "1", "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads(out.read_text())
    for side in ("orsd_gym", "trl"):
        (run,) = record["runs"][side]
        assert len(run["iteration_s"]) == len(run["rollout_s"]) == len(run["tokens"]) == 2
        assert all(0 < tokens <= 2 * 2 * 8 for tokens in run["tokens"])
        assert run["peak_rss_gb"] > 0
    assert {"rollout_s", "peak_rss_gb"} <= set(record["ratio_orsd_gym_over_trl"])
    assert "orsd-gym / TRL" in done.stdout


def test_the_committed_measurement_states_its_ratios():
    record = json.loads((ROOT / "benchmarks" / "results" / "perf" / "vs_trl.json").read_text())
    assert record["settings"]["model"] == "smollm2-135m" and record["settings"]["repeats"] >= 3
    assert {"iteration_s", "rollout_s", "update_s", "peak_rss_gb"} <= set(record["ratio_orsd_gym_over_trl"])


def test_trl_parses_tool_calls_only_for_templates_it_knows():
    """What the README says of TRL 1.16's multi-turn path (tools / environment_factory): it parses a
    model's tool calls only for chat templates it knows, and SmolLM2's is not one."""
    from transformers import AutoTokenizer
    from trl.chat_template_utils import add_response_schema

    from orsd_gym.policies.models import resolve

    with pytest.raises(ValueError, match="Unrecognized chat template"):
        add_response_schema(AutoTokenizer.from_pretrained(resolve("tiny-random")))  # SmolLM2's tokenizer
