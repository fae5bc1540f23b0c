"""The distillation probe: the expert's next action's log-probability without a rubric, on
held-out states the expert visits, under a run's starting and final weights."""

from __future__ import annotations

import pytest
import torch
from resumable_env import ENV_ID as VOWEL_ENV
from resumable_env import VowelEnv

from orsd_gym.experiments.distillation import cached_states, expert_logprob, policy_with, probe_change
from orsd_gym.train.config import load_config
from orsd_gym.train.plan import build_task_plan

VOWEL = ["model.name=tiny-random", f"env.id={VOWEL_ENV}", "eval.num_tasks=2", "rollout.max_new_tokens=8"]


def test_the_probe_scores_the_experts_actions_on_held_out_tasks_and_sees_a_policy_learn_them(tmp_path):
    config = load_config(None, VOWEL)
    states = cached_states(config, 2, tmp_path / "states.jsonl")
    # One sample per held-out task (the env's episodes are one step), the expert's action as completion.
    held_out = {task.task_id for task in build_task_plan(config, iterations=0).eval}
    assert sorted(s.task_id for s in states) == sorted(held_out)
    assert all(s.actions == [f"name a {VowelEnv.themes[s.task_id]} like aurelia"] for s in states)
    assert all(s.extra.get("privileged_prompt") is None and "aurelia" not in str(s.prompt_messages) for s in states)
    # Cached: every run is probed on the same samples.
    assert [s.token_ids for s in cached_states(config, 2, tmp_path / "states.jsonl")] == [s.token_ids for s in states]

    start = policy_with(config)
    before = expert_logprob(start, states)
    assert before["logprob"] < 0 and before["tokens"] == sum(sum(s.loss_mask) for s in states)
    weights = {k: v.clone() for k, v in start.state_dict().items()}
    # A few steps of cloning the expert's actions: the probe must see the policy learn them.
    optimizer = torch.optim.AdamW(start.trainable_parameters(), lr=3e-3)
    start.set_training(True)
    for _ in range(5):
        optimizer.zero_grad()
        for state in states:
            [logprobs] = start.score([state.token_ids], [state.loss_mask], with_grad=True)
            (-(logprobs * torch.tensor(state.loss_mask, dtype=logprobs.dtype)).sum()).backward()
        optimizer.step()
    start.set_training(False)
    learned = probe_change(before, expert_logprob(start, states))
    assert learned["change"] > 0.5 and learned["start"] == before["logprob"]
    # The weights saved before, loaded into a fresh model: the probe's starting score exactly.
    assert probe_change(before, expert_logprob(policy_with(config, weights), states))["change"] == 0.0
    with pytest.raises(ValueError, match="same states"):
        probe_change(before, expert_logprob(start, states[:1]))
