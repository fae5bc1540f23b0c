"""The data-parallel bookkeeping that needs no second process: shares of task groups, combined
metrics, the settings a run of several workers must have, and the one-process identities."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from algos_helpers import make_group

from orsd_gym.algos import make_algorithm
from orsd_gym.errors import ClusterResourcesError, ConfigError
from orsd_gym.train.config import Config, load_config, run_record
from orsd_gym.train.metrics import combine_worker_metrics
from orsd_gym.train.rundir import config_differences
from orsd_gym.train.trainer import Trainer
from orsd_gym.train.workers import SINGLE, Workers


@pytest.mark.parametrize("count", [0, 1, 5, 16, 17])
@pytest.mark.parametrize("size", [1, 2, 3, 8])
def test_shares_are_contiguous_cover_every_group_once_and_differ_by_at_most_one(count, size):
    shares = [Workers(rank, size).share(count) for rank in range(size)]
    assert [i for share in shares for i in share] == list(range(count))
    assert max(map(len, shares)) - min(map(len, shares)) <= 1
    assert max(map(len, shares)) == Workers(0, size).most(count)


def test_one_worker_collectives_are_identities():
    parameter = torch.nn.Parameter(torch.ones(3))
    parameter.grad = torch.full((3,), 0.5)
    SINGLE.all_reduce_gradients([parameter], weight=7.0)
    assert torch.equal(parameter.grad, torch.full((3,), 0.5))
    assert SINGLE.gather("x") == SINGLE.all_gather("x") == ["x"]
    assert SINGLE.on_main(lambda: 3) == 3 and SINGLE.stream() == () and Workers(1, 2).stream() == (1,)
    assert SINGLE.device("cuda") == "cuda" and Workers(1, 2, local_rank=1).device("cuda") == "cuda:1"


def test_worker_metrics_combine_by_kind():
    one = {"reward_mean": 0.1, "num_groups": 3.0, "time/orsd_total": 2.0}
    assert combine_worker_metrics([(one, 3)], {"num_groups"}) == one  # one worker: untouched
    two = {"reward_mean": 0.4, "num_groups": 1.0, "time/orsd_total": 5.0}
    combined = combine_worker_metrics([(one, 3), (two, 1)], {"num_groups"})
    assert combined == {"reward_mean": pytest.approx(0.175), "num_groups": 4.0, "time/orsd_total": 5.0}


def test_grpo_weights_a_minibatch_by_its_loss_normaliser(policy):
    batch = make_algorithm("grpo").prepare(
        make_group(policy, successes=[True, False], group_id=0, task_id=0, seed=1),
        policy,
        iteration=0,
        rng=None,
    )
    tokens = sum(sum(t.loss_mask) for t in batch.trajectories)
    assert make_algorithm("grpo").minibatch_weight(batch, [0, 1]) == tokens
    assert make_algorithm("grpo", {"loss_agg": "seq-mean-token-mean"}).minibatch_weight(batch, [0, 1]) == 2


def test_orsd_workers_share_their_offline_rubrics_and_shuffled_pool():
    orsd = make_algorithm("orsd")
    states = [
        {"offline_bundles": {"a": [["x"]]}, "shuffled_pool": {"A": ["check A"]}},
        {"offline_bundles": {"a": [["y"]], "b": [["z"]]}, "shuffled_pool": {"B": ["check B"]}},
    ]
    merged = orsd.merge_worker_states(states)
    assert merged == {
        "offline_bundles": {"a": [["x"]], "b": [["z"]]},
        "shuffled_pool": {"A": ["check A"], "B": ["check B"]},
    }
    # Loaded by every worker, the merged pool lends another task's rubric to a third task.
    orsd.load_state_dict(merged)
    assert orsd.state_dict()["shuffled_pool"] == merged["shuffled_pool"]
    assert orsd.lending.pool.lend("C", np.random.default_rng(0))[0] in ("A", "B")
    with pytest.raises(ValueError, match="differs between workers"):
        make_algorithm("grpo").merge_worker_states([{}, {"x": 1}])


def test_settings_a_data_parallel_run_cannot_work_with_fail_before_anything_loads():
    run = ["env.id=orsd_gym/GuessNumber-v0", "rollout.tasks_per_iteration=2", "rollout.group_size=2"]
    with pytest.raises(ConfigError, match="tasks_per_iteration >= 3"):
        load_config(None, [*run, "train.workers=3"])
    with pytest.raises(ConfigError, match="same optimiser steps"):
        load_config(None, [*run, "train.workers=2", "optim.minibatches=3"])
    with pytest.raises(ConfigError, match="model.device=cuda"):
        load_config(None, [*run, "train.use_gpu=true"])
    with pytest.raises(ConfigError, match="each worker uses its own GPU"):
        load_config(None, [*run, "train.workers=2", "model.device=cuda:1"])
    with pytest.raises(ConfigError, match="one of 1"):
        Trainer(load_config(None, [*run, "train.workers=2", "eval.num_tasks=1"]))


def test_a_run_saved_before_the_data_parallel_settings_existed_resumes_at_their_defaults():
    record = run_record(load_config(None, ["env.id=orsd_gym/GuessNumber-v0"]))
    old = copy.deepcopy(record)
    del old["train"]["workers"], old["env"]["backend"], old["ray"]
    assert config_differences(old, record, defaults=run_record(Config())) == {}
    assert "train.workers" in config_differences(old, record)
    record["train"]["workers"] = 2
    assert config_differences(old, record, defaults=run_record(Config())) == {"train.workers": (1, 2)}


def test_defaults_never_shadow_the_mapping_a_run_saved():
    # The default env.kwargs is {}; a run with env kwargs saved their leaves, not an empty mapping.
    record = run_record(load_config("demo", ["eval.env_kwargs={expert: false}"]))
    saved = copy.deepcopy(record)
    assert config_differences(saved, record, defaults=run_record(Config())) == {}
    record["env"]["kwargs"]["split"] = "valid_seen"
    assert config_differences(saved, record, defaults=run_record(Config())) == {
        "env.kwargs.split": ("generated", "valid_seen")
    }


def test_a_cluster_too_small_for_the_workers_and_their_env_actors_fails_at_once():
    from orsd_gym.train.launch import _check_cluster

    run = ["env.id=orsd_gym/GuessNumber-v0", "rollout.tasks_per_iteration=2", "rollout.group_size=2"]
    config = load_config(None, [*run, "train.workers=2", "env.backend=ray", "env.cpus_per_actor=1"])
    _check_cluster({"CPU": 4.0}, config, {"CPU": 1.0})  # 2 workers, each with 1 actor of its 2 slots
    with pytest.raises(ClusterResourcesError, match="2 env actors"):
        _check_cluster({"CPU": 3.0}, config, {"CPU": 1.0})
    with pytest.raises(ClusterResourcesError, match="need 2 GPU"):
        _check_cluster({"CPU": 8.0}, config, {"CPU": 1.0, "GPU": 1.0})
