"""Each env owns how it is presented: its prompt and its rubric worked examples reach the model
and the rubric writer; nothing of another env's (ALFWorld's) does."""

from __future__ import annotations

import numpy as np
from algos_helpers import make_group

from orsd_gym.algos.base import make_algorithm
from orsd_gym.envs import StepOutcome, TextEnv, register_text_env
from orsd_gym.envs.presentation import EnvPrompt, WorkedExample
from orsd_gym.policies.base import SamplingParams
from orsd_gym.rollout import RolloutOptions, collect


class _ChoresEnv(TextEnv):
    """Tidy the named furniture; presented with its own prompt and worked example."""

    prompt = EnvPrompt("You tidy a tiny flat, one piece of furniture per task. Actions: 'tidy X'.", noop_action="wait")
    rubric_examples = (
        WorkedExample(
            task_type="desk",
            task="tidy the writing desk",
            attempts=("  1. > tidy desk\n     The desk is tidy.", "  1. > wait"),
            bundle=("Tidies the writing desk first", "Does not wait"),
            thing="teapot",
        ),
    )
    things = ("sofa", "bed", "shelf")

    @property
    def tasks(self):
        return self.things

    def _task_text(self, task_id):
        return f"tidy the {self.things[task_id]}"

    def _start_task(self, task_id, options):
        return "You are in the flat.", {"task_type": "furniture"}

    def _play(self, action):
        if action.strip() == f"tidy {self.things[self.task_id]}":
            return StepOutcome("It is tidy.", reward=1.0, terminated=True, won=True)
        return StepOutcome("Nothing happens.", is_valid_action=False)


CHORES = register_text_env("ChoresTest", _ChoresEnv, max_episode_steps=3, description="tidy")
ALFWORLD_WORDS = ("muffin", "scarf", "household", "countertop")


def _proposal_prompts(policy, env_id):
    """The rubric writer's prompts of one ORSD step on a group of attempts at an ``env_id`` task."""
    group = make_group(policy, group_id=0, task_id=0, successes=[True, False, False], seed=5)
    for trajectory in group:
        trajectory.env_id = env_id
    seen = []
    generate = policy.generate

    def spy(contexts, *args, **kwargs):
        seen.extend(policy.tokenizer.decode(c) for c in contexts)
        return generate(contexts, *args, **kwargs)

    policy.generate = spy
    try:
        algorithm = make_algorithm(
            "orsd", {"num_bundles": 1, "proposal_max_new_tokens": 4}, verifier=policy.copy_frozen()
        )
        algorithm.prepare(group, policy, iteration=0, rng=np.random.default_rng(0))
    finally:
        del policy.generate
    assert seen, "ORSD wrote no rubric"
    return seen


def test_a_registered_env_presents_itself_to_the_policy_and_the_rubric_writer(policy):
    (played,) = collect(
        CHORES,
        policy,
        [0],
        group_size=1,
        sampling=SamplingParams(max_new_tokens=4),
        options=RolloutOptions(max_turns=1, action_format="last_line"),
    )
    assert played.prompt_messages[0]["content"].startswith("You tidy a tiny flat")
    for prompt in _proposal_prompts(policy, CHORES):
        assert "tidy the writing desk" in prompt and "Tidies the writing desk first" in prompt
        assert not any(word in prompt for word in ALFWORLD_WORDS)


def test_an_env_without_worked_examples_gets_none(policy):
    for prompt in _proposal_prompts(policy, "orsd_gym/GuessNumber-v0"):
        assert "Task:" in prompt and prompt.count("Task:") == 1  # the request alone, no example before it
        assert not any(word in prompt for word in ALFWORLD_WORDS)
