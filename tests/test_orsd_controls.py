"""ORSD's rubric sources (the method, its positive and negative controls, a person's file), the
comparison arms that select them, and the report a researcher reads."""

from __future__ import annotations

import copy
import json
import math

import numpy as np
import pytest
import torch
from algos_helpers import make_group

from orsd_gym.algos.base import make_algorithm
from orsd_gym.algos.orsd.sources import ShuffledRubrics, file_bundles, load_rubric_file
from orsd_gym.envs import StepOutcome, TextEnv, register_text_env
from orsd_gym.errors import ConfigError, UsageError
from orsd_gym.experiments.compare import Arm, compare, run_config
from orsd_gym.experiments.plots import coinciding_arms
from orsd_gym.train.config import load_config, resolve_algo
from orsd_gym.train.stats import Estimate, mean_ci


def test_arms_name_an_algorithm_and_a_rubric_source(tmp_path):
    assert Arm.parse("grpo") == Arm("grpo", "grpo", {})
    assert Arm.parse("orsd:expert") == Arm("orsd:expert", "orsd", {"rubric_source": "expert"})
    with pytest.raises(UsageError, match="a variant is one an algorithm declares"):
        Arm.parse("orsd:oracle")
    with pytest.raises(UsageError):
        Arm.parse("grpo:expert")
    base = load_config(None, ["env.id=orsd_gym/GuessNumber-v0", "eval.num_tasks=4", "env.kwargs={}"])
    with pytest.raises(ConfigError, match="needs the env's expert plan"):
        run_config(base, Arm.parse("orsd:expert"), 1, tmp_path)  # GuessNumber has no expert


def test_any_algorithm_declares_the_variants_an_arm_can_name(tmp_path):
    """Arm variants come from the algorithm registry: an algorithm of a user's declares its own,
    with no change to the comparison."""
    from orsd_gym.algos.base import ALGORITHMS, register_algorithm
    from orsd_gym.algos.grpo import GRPO

    class Clipped(GRPO):
        name = "clipped_test"
        variants = {"tight": {"clip_low": 0.05, "clip_high": 0.05}}

    register_algorithm(Clipped)
    try:
        arm = Arm.parse("clipped_test:tight@clip_high=0.1")
        assert arm == Arm("clipped_test:tight@clip_high=0.1", "clipped_test", {"clip_low": 0.05, "clip_high": 0.1})
        base = load_config(None, ["env.id=orsd_gym/GuessNumber-v0", "eval.num_tasks=4", "env.kwargs={}"])
        assert resolve_algo(run_config(base, arm, 0, tmp_path)).clip_low == 0.05
        with pytest.raises(UsageError, match="clipped_test:tight"):
            Arm.parse("clipped_test:loose")
    finally:
        ALGORITHMS.pop("clipped_test")


def test_arms_carry_algorithm_settings_for_a_sweep(tmp_path):
    arm = Arm.parse("orsd:shuffled@beta=0.05@delta_scale=raw")
    assert arm.params == {"rubric_source": "shuffled", "beta": 0.05, "delta_scale": "raw"}
    assert arm.slug == "orsd-shuffled-beta=0.05-delta_scale=raw"
    base = load_config(None, ["env.id=orsd_gym/GuessNumber-v0", "eval.num_tasks=4", "env.kwargs={}"])
    config = run_config(base, Arm.parse("orsd@beta=0.2"), 0, tmp_path)
    assert resolve_algo(config).beta == 0.2
    assert config.train.output_dir.endswith("orsd-beta=0.2-seed0")
    with pytest.raises(ConfigError, match="betta"):
        run_config(base, Arm.parse("orsd@betta=0.2"), 0, tmp_path)  # a misspelt key fails before training
    for bad in ("orsd@beta", "orsd@=1", "random@beta=0.1", "sb3:dqn@lr=1"):
        with pytest.raises(UsageError):
            Arm.parse(bad)


def test_rubric_files_map_task_keys_or_star_to_bundles(tmp_path):
    path = tmp_path / "rubrics.yaml"
    path.write_text("'env:task-1': [checks the door, opens it]\n'*': [[looks around first], [reads the hint]]\n")
    table = load_rubric_file(path)
    assert file_bundles(table, "env:task-1") == [["checks the door", "opens it"]]
    assert file_bundles(table, "env:task-2") == [["looks around first"], ["reads the hint"]]
    path.write_text("'*': 3\n")
    with pytest.raises(ConfigError, match="list of criteria"):
        load_rubric_file(path)
    with pytest.raises(ConfigError, match="does not exist"):
        load_rubric_file(tmp_path / "missing.yaml")


def test_shuffled_rubrics_never_lend_a_task_its_own():
    pool = ShuffledRubrics()
    rng = np.random.default_rng(0)
    pool.remember("a", ["rubric of a"])
    assert pool.lend("a", rng) is None  # nothing written for another task yet
    pool.remember("b", ["rubric of b"])
    pool.remember("c", ["rubric of c"])
    for _ in range(50):
        key, bundle = pool.lend("a", rng)
        assert key != "a" and bundle == [f"rubric of {key}"]
    assert ShuffledRubrics(pool.state()).pool == pool.pool  # checkpointed and restored


class _RecordingPeers:
    """One worker alone, recording what it sends the others."""

    def __init__(self) -> None:
        self.sent = []

    def all_gather(self, value):
        self.sent.append(value)
        return [value]


def test_the_lending_seed_does_not_depend_on_how_many_groups_were_mixed(policy):
    """Worker 0 lends with the seed a single process draws: it must not depend on how many of
    its groups were mixed, which decides how much randomness the policy's proposals and a random
    selection use first."""
    config = {"rubric_source": "shuffled", "shuffled_from": "policy", "selection": "random", "num_bundles": 2}
    seeds = []
    for outcomes in ([[True, True], [False, False]], [[True, False], [False, False]], [[True, False], [False, True]]):
        batch = [
            t
            for g, successes in enumerate(outcomes)
            for t in make_group(policy, successes=successes, group_id=g, task_id=g, seed=3 + g)
        ]
        peers = _RecordingPeers()
        orsd = make_algorithm("orsd", {**config, "proposal_max_new_tokens": 6}, verifier=policy)
        orsd.prepare(batch, policy, iteration=0, rng=np.random.default_rng(7), peers=peers)
        [(_, seed)] = peers.sent
        seeds.append(seed)
    assert seeds[0] == seeds[1] == seeds[2]


def test_file_rubrics_go_through_verification_and_selection(policy, tmp_path):
    path = tmp_path / "rubrics.yaml"
    path.write_text("'*': [[Guesses the middle first], [Reads the hint before guessing]]\n")
    group = make_group(policy, successes=[True, False, False], group_id=0, task_id=0, seed=3)
    orsd = make_algorithm("orsd", {"rubric_source": "file", "rubric_file": str(path), "min_corr": -1.0})
    batch = orsd.prepare(group, policy, iteration=0, rng=np.random.default_rng(0))
    (record,) = batch.audit
    assert record["rubric_source"] == "file" and record["bundles"] == [
        ["Guesses the middle first"],
        ["Reads the hint before guessing"],
    ]
    assert record["scores"] is not None and record["selected"] in (0, 1)


def test_intervals_stay_in_the_metric_range_and_say_when_there_are_too_few_seeds():
    wide = mean_ci([0.5, 1.0], bounds=(0.0, 1.0))
    assert str(wide).startswith("0.750 [") and wide.low == 0.0 and wide.high == 1.0
    assert "no interval" in str(mean_ci([0.5], bounds=(0.0, 1.0)))
    assert Estimate.from_dict(wide.as_dict(), (0.0, 1.0)).high == 1.0
    assert math.isnan(mean_ci([]).mean)


def test_coinciding_curves_are_reported():
    curve = [{"iteration": i, "env_steps": i, "eval/success_rate": v} for i, v in enumerate((0.5, 0.75))]
    summary = {
        "algos": ["grpo", "orsd"],
        "runs": {"grpo-seed0": {"algo": "grpo", "curve": curve}, "orsd-seed0": {"algo": "orsd", "curve": curve}},
    }
    assert coinciding_arms(summary) == [("grpo", "orsd")]


class _ExpertVowelEnv(TextEnv):
    """Reward = share of vowels in a one-step answer; with ``expert`` every info carries the
    expert's plan (so the expert and shuffled rubric sources have something to restate)."""

    themes = ("animal", "colour", "city", "food", "tool", "plant", "river", "song", "game", "name")

    def __init__(self, expert: bool = False, render_mode=None):
        super().__init__(render_mode=render_mode)
        self.expert = expert

    @property
    def tasks(self):
        return self.themes

    def _task_text(self, task_id):
        return f"Write a {self.themes[task_id]} word with many vowels."

    def _start_task(self, task_id, options):
        return f"Your task is to: {self._task_text(task_id).lower()}", self._plan()

    def _plan(self):
        return {"expert_actions": [f"aeiou {self.themes[self.task_id or 0]}"]} if self.expert else {}

    def _play(self, action):
        letters = [c for c in action.lower() if c.isalpha()]
        score = sum(c in "aeiou" for c in letters) / max(1, len(letters))
        return StepOutcome(f"Score {score:.2f}.", reward=score, terminated=True, won=score > 0.5, info=self._plan())


EXPERT_VOWELS = register_text_env("ExpertVowelTest", _ExpertVowelEnv, max_episode_steps=1)


@pytest.mark.slow
def test_every_rubric_source_runs_end_to_end(tmp_path):
    """Each arm of the study trains on tiny-random and records its rubric source; the expert arm
    applies the expert's bundle, the shuffled arm never its own task's, the file arm the file's."""
    rubrics = tmp_path / "rubrics.yaml"
    rubrics.write_text("'*': [[Writes a word full of vowels], [Answers with a single word]]\n")
    base = load_config(
        None,
        [
            "model.name=tiny-random",
            f"env.id={EXPERT_VOWELS}",
            "env.kwargs={expert: true}",
            "rollout.tasks_per_iteration=3",
            "rollout.group_size=3",
            "rollout.max_turns=1",
            "rollout.max_new_tokens=6",
            "rollout.action_format=last_line",
            "algo.per_algo={grpo: {reward: {outcome: return}}, orsd: {min_corr: -1.0, num_bundles: 2, "
            "proposal_max_new_tokens: 16, delta_scale: normalized, beta: 0.5}}",
            "train.iterations=1",
            "probes.gradient_share.every=1",
            "eval.every=0",
            "eval.num_tasks=1",
            "train.threads=1",
            "logging.live=false",
            "logging.tensorboard=false",
        ],
    )
    arms = {
        "orsd": "policy",
        "orsd:expert": "expert",
        "orsd:shuffled": "shuffled",
        "orsd:expert@delta_scale=bounded@correction_bound=0.3": "expert",
    }
    compare(base, list(arms), [0], tmp_path / "out", live=False)
    with_file = copy.deepcopy(base)
    with_file.algo.per_algo["orsd"]["rubric_file"] = str(rubrics)
    compare(with_file, ["orsd:file"], [0], tmp_path / "out", live=False)
    arms["orsd:file"] = "file"
    for arm, source in arms.items():
        run = tmp_path / "out" / "runs" / f"{Arm.parse(arm).slug}-seed0"
        groups = json.loads((run / "audit" / "iter_000001" / "groups.json").read_text())
        assert groups and all(g["rubric_source"] == source for g in groups), arm
        shaped = [g for g in groups if g["selected"] is not None]
        if source in ("expert", "shuffled", "file"):
            assert shaped, arm  # every group has mixed rewards (the vowel share varies)
        if source == "expert":
            assert all(len(g["bundles"]) == 1 and "aeiou" in " ".join(g["bundles"][0]) for g in shaped)
            assert all("credit_alignment" in g for g in shaped)
        if source == "shuffled":
            assert all(g["lent_from"] and g["lent_from"] != g["task_key"] for g in shaped)
        if "bounded" in arm:
            extras = json.loads((run / "audit" / "iter_000001" / "token_extras.json").read_text())
            for shaped_adv, outcome in zip(extras["advantages"], extras["grpo_advantage"], strict=True):
                shaped_adv, outcome = torch.tensor(shaped_adv), torch.tensor(outcome)
                assert torch.all((shaped_adv - outcome).abs() <= 0.3 * outcome.abs() + 1e-6)
            (metrics,) = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
            assert 0.0 <= metrics["orsd/correction_capped_frac"] <= 1.0
            # The update measured both terms of its gradient (the split itself: tests/test_grad_share.py).
            assert metrics["grad_share/correction_norm"] > 0 and metrics["grad_share/outcome_norm"] > 0
            assert -1.0 <= metrics["grad_share/cosine"] <= 1.0
        if source == "file":
            assert all(
                g["bundles"] == [["Writes a word full of vowels"], ["Answers with a single word"]] for g in shaped
            )


def test_turn_placement_restates_the_rubric_next_to_every_model_turn(policy):
    from orsd_gym.algos.orsd.replay import DEFAULT_RUBRIC_TEMPLATE, _privileged, replay_deltas
    from orsd_gym.policies.base import SamplingParams
    from orsd_gym.rollout import RolloutOptions, TaskSpec, collect

    (trajectory,) = collect(
        "orsd_gym/GuessNumber-v0",
        policy,
        [TaskSpec(0, 7)],
        group_size=1,
        sampling=SamplingParams(max_new_tokens=6),
        options=RolloutOptions(max_turns=3, action_format="last_line"),
    )
    env_turns = sum(span.kind == "env" for span in trajectory.spans)
    assert env_turns == 2 and len(trajectory.observation_messages) >= env_turns
    tokens, mask, (old, new) = _privileged(policy, trajectory, "- Reads the hint", "turn", DEFAULT_RUBRIC_TEMPLATE)
    text = policy.tokenizer.decode(tokens)
    assert text.count("Reads the hint") == 1 + env_turns  # first user message and every bridge
    assert [tokens[n] for n in new] == [trajectory.token_ids[o] for o in old]  # the sampled tokens, unchanged
    assert old == [t for t, m in enumerate(trajectory.loss_mask) if m] and sum(mask) == len(old)
    (delta,) = replay_deltas(policy, [trajectory], ["- Reads the hint"], placement="turn")
    sampled = torch.as_tensor(trajectory.loss_mask, dtype=torch.bool)
    assert delta[~sampled].abs().max() == 0 and delta[sampled].abs().max() > 0
