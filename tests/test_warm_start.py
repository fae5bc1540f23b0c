"""Behaviour-cloning warm start: expert demonstrations in the rollout layout, and cloning them."""

from __future__ import annotations

import pytest

pytest.importorskip("textworld")

import torch  # noqa: E402

from orsd_gym.policies.models import load_policy  # noqa: E402
from orsd_gym.probes import probes_for  # noqa: E402
from orsd_gym.probes.teacher import RubricContext  # noqa: E402
from orsd_gym.train import warm_start  # noqa: E402
from orsd_gym.train.callbacks import demonstration_edit  # noqa: E402
from orsd_gym.train.config import load_config  # noqa: E402
from orsd_gym.train.plan import build_task_plan  # noqa: E402
from orsd_gym.train.warm_start import clone, collect_demonstrations, ensure_warm_start  # noqa: E402

EASY_ALFWORLD = [
    "model.name=tiny-random",
    "env.id=orsd_gym/ALFWorld-v0",
    "env.kwargs.task_types=[pick_and_place_simple]",
    "env.kwargs.generator={num_tasks: 4, max_receptacles: 2, num_distractors: 0}",
    "rollout.max_turns=8",
    "rollout.action_format=admissible",
    "warm_start.episodes=3",
    "eval.num_tasks=2",
    "warm_start.epochs=3",
    "warm_start.lr=3e-3",
]


@pytest.fixture(scope="module")
def setup():
    config = load_config(None, EASY_ALFWORLD)
    policy = load_policy("tiny-random")
    plan = build_task_plan(config)
    return config, plan, policy, collect_demonstrations(config, plan, policy)


def test_demonstrations_are_expert_wins_in_rollout_layout(setup):
    config, plan, policy, demos = setup
    assert len(demos) == 3 and all(d.success for d in demos)
    # Demonstrations come from training tasks only, never from the held-out floor plans.
    assert all(":train:" in task.key for task in plan.warm_start)
    assert [d.task_id for d in demos] == [task.task_id for task in plan.warm_start]
    for demo in demos:
        assert demo.format_valid == [True] * demo.num_turns
        decoded = [
            policy.tokenizer.decode(demo.token_ids[s.start : s.end], skip_special_tokens=True)
            for s in demo.model_spans()
        ]
        assert decoded == demo.actions  # each cloned span is exactly the expert's action (+ end of turn)
        assert "Choose one of these actions" in demo.prompt_messages[1]["content"]


def test_cloning_lowers_the_demonstrations_nll(setup):
    config, _, policy, demos = setup
    metrics = clone(policy, demos, config)
    assert metrics["warm_start/last_epoch_nll"] < metrics["warm_start/first_epoch_nll"]
    assert metrics["warm_start/expert_success"] == 1.0


def test_warm_start_is_cached_and_reused(tmp_path, setup):
    config, plan, _, _ = setup
    path = tmp_path / "ws.safetensors"
    first = load_policy("tiny-random")
    cloned = ensure_warm_start(config, plan, first, path)
    assert cloned is not None and path.is_file()
    second = load_policy("tiny-random")
    # Loaded, not cloned again: every run starting from it still records what the warm start was.
    assert ensure_warm_start(config, plan, second, path) == {**cloned, "warm_start/loaded": 1.0}
    a, b = first.state_dict(), second.state_dict()
    assert all((a[k] == b[k]).all() for k in a)


def test_a_rubric_share_of_the_demonstrations_carries_the_expert_rubric(setup):
    _, _, policy, plain = setup
    rubrics = ["probes.rubric_demonstrations.share=0.67", "probes.rubric_demonstrations.placement=user"]
    config = load_config(None, [*EASY_ALFWORLD, *rubrics])
    plan = build_task_plan(config)
    edit = demonstration_edit(probes_for(config), config, len(plan.warm_start))
    demos = collect_demonstrations(config, plan, policy, edit)
    marked = [d for d in demos if d.extra.get("privileged_prompt")]
    assert len(marked) == 2 and all(d.success for d in demos)
    for demo in marked:
        user = next(m["content"] for m in demo.prompt_messages if m["role"] == "user")
        rubric = RubricContext().expert_rubric(demo.infos[0], demo.env_id)  # the env's plan at reset, restated
        assert rubric and all(criterion in user for criterion in rubric)
    # The same tasks and the same expert actions; only the context of the marked ones differs.
    assert [(d.task_id, d.actions) for d in demos] == [(d.task_id, d.actions) for d in plain]


def _fresh_clone(config, demos, path, seed):
    policy = load_policy("tiny-random")
    torch.manual_seed(seed)
    metrics = clone(policy, demos, config, path)
    return policy.state_dict(), metrics


def test_an_interrupted_cloning_continues_exactly_where_it_stood(tmp_path, setup, monkeypatch):
    config, _, _, demos = setup
    config = load_config(None, [*EASY_ALFWORLD, "warm_start.batch_size=1", "model.lora.dropout=0.5"])
    whole, whole_metrics = _fresh_clone(config, demos, None, seed=7)

    saves = []
    real_save = warm_start.save_progress

    def save_then_stop(*args):
        real_save(*args)
        saves.append(args[1].epoch)
        if len(saves) == 4:  # the first step of the second epoch
            raise KeyboardInterrupt

    monkeypatch.setattr(warm_start, "SAVE_EVERY_SECONDS", 0.0)
    monkeypatch.setattr(warm_start, "save_progress", save_then_stop)
    path = tmp_path / "ws.progress.safetensors"
    with pytest.raises(KeyboardInterrupt):
        _fresh_clone(config, demos, path, seed=7)
    assert saves == [0, 0, 1, 1] and path.is_file()

    # Another process, another torch seed: the saved random states and moments are what count.
    resumed, resumed_metrics = _fresh_clone(config, demos, path, seed=12345)
    assert resumed_metrics == whole_metrics
    assert all(torch.equal(resumed[k], whole[k]) for k in whole)


def test_progress_made_for_other_settings_is_not_continued(tmp_path, setup, monkeypatch, capsys):
    config, _, _, demos = setup
    monkeypatch.setattr(warm_start, "SAVE_EVERY_SECONDS", 0.0)
    path = tmp_path / "ws.progress.safetensors"
    other = load_config(None, [*EASY_ALFWORLD, "warm_start.lr=1e-3"])
    _fresh_clone(other, demos, path, seed=0)
    assert path.is_file()
    expected, _ = _fresh_clone(config, demos, None, seed=0)
    started_over, _ = _fresh_clone(config, demos, path, seed=0)
    assert all(torch.equal(started_over[k], expected[k]) for k in expected)
    assert "is not used: it was made for other demonstrations or cloning settings" in capsys.readouterr().err
    path.write_bytes(b"torn")
    _fresh_clone(config, demos, path, seed=0)
    assert "is not used: it cannot be read" in capsys.readouterr().err


def test_a_finished_warm_start_leaves_no_progress_file(tmp_path, setup):
    config, plan, _, _ = setup
    path = tmp_path / "ws.safetensors"
    ensure_warm_start(config, plan, load_policy("tiny-random"), path)
    assert path.is_file() and list(tmp_path.iterdir()) == [path]
