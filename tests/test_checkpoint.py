"""Checkpoints: atomic, verified on load, damaged ones skipped for the previous good one."""

from __future__ import annotations

import json

import pytest
import torch

from orsd_gym.errors import CheckpointError
from orsd_gym.train.checkpoint import (
    CorruptCheckpointWarning,
    join_optimizer_state,
    latest_good_checkpoint,
    list_checkpoints,
    load_checkpoint,
    save_checkpoint,
    split_optimizer_state,
)


def _save(root, iteration, value, keep=3):
    return save_checkpoint(
        root,
        iteration,
        policy_state={"w": torch.full((3,), float(value))},
        optimizer_tensors={"0.exp_avg": torch.zeros(3)},
        state={"iteration": iteration, "note": value},
        keep=keep,
    )


def test_round_trip_and_retention(tmp_path):
    for it in range(1, 6):
        _save(tmp_path, it, it, keep=2)
    assert [p.name for p in list_checkpoints(tmp_path)] == ["iter_000004", "iter_000005"]
    ckpt = latest_good_checkpoint(tmp_path)
    assert ckpt.iteration == 5 and torch.equal(ckpt.policy_state["w"], torch.full((3,), 5.0))
    assert not any(p.name.startswith(".") for p in tmp_path.iterdir())


@pytest.mark.parametrize("damage", ["truncate_weights", "drop_manifest", "edit_state"])
def test_damaged_checkpoint_falls_back(tmp_path, damage):
    _save(tmp_path, 1, 1)
    newest = _save(tmp_path, 2, 2)
    if damage == "truncate_weights":
        data = (newest / "policy.safetensors").read_bytes()
        (newest / "policy.safetensors").write_bytes(data[: len(data) // 2])
    elif damage == "drop_manifest":
        (newest / "manifest.json").unlink()
    else:
        state = json.loads((newest / "state.json").read_text())
        state["note"] = 99
        (newest / "state.json").write_text(json.dumps(state))
    with pytest.warns(CorruptCheckpointWarning, match="iter_000002"):
        ckpt = latest_good_checkpoint(tmp_path)
    assert ckpt.iteration == 1
    with pytest.raises(CheckpointError, match="unusable"):
        load_checkpoint(newest)


def test_unfinished_staging_dir_is_ignored(tmp_path):
    _save(tmp_path, 1, 1)
    (tmp_path / ".iter_000002.tmp-123").mkdir()
    (tmp_path / "iter_000003").mkdir()  # a rename that never got its files
    with pytest.warns(CorruptCheckpointWarning):
        assert latest_good_checkpoint(tmp_path).iteration == 1


def test_no_checkpoint_is_none(tmp_path):
    assert latest_good_checkpoint(tmp_path / "missing") is None


def test_optimizer_state_round_trip():
    params = [torch.nn.Parameter(torch.randn(4)), torch.nn.Parameter(torch.randn(2, 2))]
    opt = torch.optim.AdamW(params, lr=0.1)
    (params[0].sum() + params[1].sum()).backward()
    opt.step()
    tensors, rest = split_optimizer_state(opt.state_dict())
    rest = json.loads(json.dumps(rest))
    restored = join_optimizer_state(tensors, rest)
    fresh = torch.optim.AdamW([torch.nn.Parameter(p.detach().clone()) for p in params], lr=0.1)
    fresh.load_state_dict(restored)
    for a, b in zip(opt.state_dict()["state"].values(), fresh.state_dict()["state"].values()):
        assert torch.equal(a["exp_avg"], b["exp_avg"]) and torch.equal(a["step"], b["step"])
