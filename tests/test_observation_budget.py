"""Observations longer than the room the model's turn needs: cut to it with a marker the model
reads, counted; an episode where no turn fits ends truncated; an update with no model token is
skipped with a metric, never a torch error."""

from __future__ import annotations

import pytest
from contract import PlainTextGame, fuzz_observation_sizes
from huge_observation_env import ENV_ID as PAGE_DUMP_ENV

from orsd_gym.policies.base import SamplingParams
from orsd_gym.rollout import EnvSetup, RolloutOptions, collect
from orsd_gym.rollout.fit import CUT_MARKER
from orsd_gym.train.config import load_config
from orsd_gym.train.metrics import read_metrics
from orsd_gym.train.trainer import Trainer

MARKER = CUT_MARKER.split("{")[0]


def test_a_page_dump_is_cut_to_leave_the_model_its_turn(policy):
    options = RolloutOptions(action_format="last_line", max_turns=3, max_episode_tokens=512)
    env = EnvSetup(PAGE_DUMP_ENV, kwargs={"first_only": True})
    out = collect(env, policy, [0], group_size=2, sampling=SamplingParams(8), options=options)
    for t in out:
        assert t.model_spans() and t.num_turns >= 1  # the model answered the page
        assert len(t.token_ids) <= 512
        cut = t.infos[0]["observation_cut"]
        assert cut["total_chars"] > cut["shown_chars"] > 0 and t.extra["observations_cut"] >= 1
        assert (
            MARKER in t.observations[0]
            and f"{cut['shown_chars']} of {cut['total_chars']} characters" in t.observations[0]
        )
        prompt = policy.tokenizer.decode(t.token_ids[: t.spans[0].end])
        assert MARKER in prompt  # what the model read says it was cut


@pytest.mark.parametrize("layout", ["sequence", "per_step"])
def test_observation_sizes_up_to_the_budget_and_beyond(policy, layout):
    budget = 384
    options = RolloutOptions(action_format="last_line", max_turns=3, max_episode_tokens=budget, layout=layout)

    def play(observation):
        env = PlainTextGame(observation=observation, steps=3)
        return collect(env, policy, [0], group_size=1, sampling=SamplingParams(6), options=options)

    fuzz_observation_sizes(play, budget, max_examples=15)


def _config(out, *extra):
    return load_config(
        None,
        [
            "model.name=tiny-random",
            f"env.id={PAGE_DUMP_ENV}",
            "rollout.tasks_per_iteration=1",
            "rollout.group_size=2",
            "rollout.max_turns=2",
            "rollout.max_new_tokens=8",
            "rollout.action_format=last_line",
            "algo.per_algo.grpo.kl_coef=0.1",  # a loss term whatever the advantages: an update runs
            "eval.every=0",
            "eval.num_tasks=1",
            "train.iterations=1",
            "train.threads=1",
            "logging.live=false",
            "logging.tensorboard=false",
            f"train.output_dir={out}",
            *extra,
        ],
    )


def test_a_run_on_huge_observations_trains_on_the_cut_ones(tmp_path):
    Trainer(_config(tmp_path, "rollout.max_episode_tokens=512")).run()
    (record,) = read_metrics(tmp_path / "metrics.jsonl")
    assert record["train/observations_cut"] >= 2 and record["train/tokens_generated"] > 0
    assert record["loss/skipped"] == 0.0 and record["loss/no_model_tokens"] == 0.0


def test_an_update_with_no_model_token_is_skipped_with_a_metric(tmp_path):
    """A budget the prompt alone fills: no turn fits, every episode ends truncated, and the
    update (with a KL term it would otherwise take) is skipped rather than fail in torch."""
    Trainer(_config(tmp_path, "rollout.max_episode_tokens=48")).run()
    (record,) = read_metrics(tmp_path / "metrics.jsonl")
    assert record["train/tokens_generated"] == 0 and record["train/truncated_frac"] == 1.0
    assert record["loss/skipped"] == 1.0 and record["loss/no_model_tokens"] == 1.0
