"""Config loading: YAML + dotted overrides, typed coercion, fail-fast errors naming the key."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Literal

import pytest

from orsd_gym import configio
from orsd_gym.confighelp import field_help
from orsd_gym.errors import ConfigError
from orsd_gym.train.config import Config, EnvConfig, WarmStartConfig, load_config, resolve_algo, run_record


@dataclass
class _Inner:
    lr: float = 0.1
    mode: Literal["a", "b"] = "a"
    names: list[str] = field(default_factory=list)
    limit: int | None = None


@dataclass
class _Outer:
    inner: _Inner = field(default_factory=_Inner)
    flag: bool = False


def test_yaml_and_overrides(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("inner:\n  lr: 1e-5\n  names: [x, y]\nflag: true\n")
    cfg = configio.load(_Outer, path, ["inner.mode=b", "inner.limit=7"])
    assert cfg.inner.lr == pytest.approx(1e-5)
    assert cfg.inner.names == ["x", "y"]
    assert (cfg.inner.mode, cfg.inner.limit, cfg.flag) == ("b", 7, True)
    assert configio.load(_Outer, path, ["inner.limit=null"]).inner.limit is None


@pytest.mark.parametrize(
    "override, message",
    [
        ("inner.lrr=0.1", r"inner\.lrr.*did you mean 'inner\.lr'"),
        ("inner.mode=c", r"inner\.mode: 'c' is not one of"),
        ("inner.lr=fast", r"inner\.lr: expected a number"),
        ("flag=3", r"flag: expected true/false"),
        ("inner.limit=2.5", r"inner\.limit"),
        ("nonsense", r"must look like 'section\.key=value'"),
        ("flag.x=1", r"flag: expected true/false"),
        ("inner=3", r"inner: expected a section"),
    ],
)
def test_bad_keys_and_values_name_the_key(override, message):
    with pytest.raises(ConfigError, match=message):
        configio.load(_Outer, None, [override])


def test_missing_and_malformed_files(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        configio.load(_Outer, tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("inner: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        configio.load(_Outer, bad)
    listy = tmp_path / "list.yaml"
    listy.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="mapping"):
        configio.load(_Outer, listy)


def test_training_config_validates_values():
    cfg = configio.load(Config, None, ["optim.lr=3e-6", "rollout.group_size=8", "env.kwargs={split: generated}"])
    assert cfg.optim.lr == pytest.approx(3e-6)
    assert cfg.rollout.group_size == 8
    assert cfg.env.kwargs == {"split": "generated"}
    with pytest.raises(ConfigError, match="rollout.*group_size must be >= 1"):
        configio.load(Config, None, ["rollout.group_size=0"])
    with pytest.raises(ConfigError, match="top_p must be 1.0"):
        configio.load(Config, None, ["rollout.top_p=0.9"])


def test_round_trip_through_dict():
    cfg = configio.load(Config, None, ["train.iterations=3", "model.lora.enabled=true"])
    again = configio.from_dict(Config, configio.to_dict(cfg))
    assert again == cfg


@pytest.mark.parametrize("name", configio.shipped_configs())
def test_shipped_configs_validate_for_every_algorithm(name):
    from orsd_gym.algos.base import ALGORITHMS
    from orsd_gym.train.config import load_config

    for algo in ALGORITHMS:
        load_config(name, [f"algo.name={algo}"])


def test_shipped_configs_exist():
    assert {"alfworld_cpu", "webshop_cpu", "alfworld_qwen3_1.7b", "webshop_qwen3_1.7b"} <= set(
        configio.shipped_configs()
    )


def test_a_misspelt_per_algo_name_or_key_fails_with_a_suggestion():
    with pytest.raises(ConfigError, match=r"algo.per_algo.osrd: .*did you mean 'algo.per_algo.orsd'"):
        load_config(None, ["algo.per_algo.osrd.beta=0.77"])
    with pytest.raises(ConfigError, match=r"'algo.per_algo.orsd.betta'; did you mean 'algo.per_algo.orsd.beta'"):
        load_config(None, ["algo.name=grpo", "algo.per_algo.orsd.betta=0.77"])
    assert load_config(None, ["algo.name=orsd", "algo.per_algo.orsd.beta=0.77"]).algo.per_algo["orsd"]["beta"] == 0.77


def test_an_algorithm_setting_has_one_spelling():
    # An earlier version's spelling, a setting under an algorithm without it and the sampling
    # temperature under an algorithm each say where the setting lives.
    with pytest.raises(ConfigError, match=r"'algo.params' is no longer read: .*algo.per_algo.orsd.beta"):
        load_config(None, ["algo.name=orsd", "algo.params.beta=0.2"])
    with pytest.raises(ConfigError, match=r"'algo.per_algo.grpo.beta'; it is a setting of orsd: .*orsd.beta"):
        load_config(None, ["algo.per_algo.grpo.beta=0.2"])
    with pytest.raises(ConfigError, match="algo.per_algo.orsd.temperature: set rollout.temperature"):
        load_config(None, ["algo.per_algo.orsd.temperature=0.5"])
    # A base algorithm's settings reach the algorithms built on it; their own entry wins.
    config = load_config(
        None,
        [
            "algo.name=orsd",
            "rollout.temperature=0.7",
            "algo.per_algo.grpo={kl_coef: 0.01, clip_low: 0.3}",
            "algo.per_algo.orsd={clip_low: 0.1, beta: 0.2}",
        ],
    )
    settings = resolve_algo(config)
    assert (settings.kl_coef, settings.clip_low, settings.beta) == (0.01, 0.1, 0.2)
    assert not hasattr(settings, "temperature")  # rollout.temperature is its one home
    # A run's record holds the resolved settings in the same spelling and loads as a config.
    record = run_record(config)
    assert set(record["algo"]) == {"name", "per_algo"} and set(record["algo"]["per_algo"]) == {"orsd"}
    assert resolve_algo(configio.from_dict(Config, record)) == settings


def test_orsd_gym_train_resolves_the_algorithm_settings_once_to_check_and_once_to_train(tmp_path, monkeypatch):
    """No memo: the loader resolves to check, the trainer resolves once and hands its settings
    on (the run's record, the frozen models, the algorithm, the probes)."""
    from orsd_gym.cli import main

    calls = []
    build = configio.from_dict

    def counted(cls, data, *, prefix=""):
        calls.extend([prefix] if prefix.startswith("algo.per_algo.") else [])
        return build(cls, data, prefix=prefix)

    monkeypatch.setattr(configio, "from_dict", counted)
    overrides = ["model.name=tiny-random", "env.id=orsd_gym/GuessNumber-v0", "env.kwargs={}", "algo.name=orsd"]
    overrides += ["train.iterations=0", "eval.env_kwargs={}", "eval.num_tasks=2", "warm_start.env_kwargs={}"]
    overrides += ["eval.every=0", "warm_start.episodes=0", "logging.live=false", f"train.output_dir={tmp_path / 'run'}"]
    assert main(["train", "--config", "demo", *overrides]) == 0
    assert calls == ["algo.per_algo.orsd.", "algo.per_algo.orsd."]


def test_every_config_mistake_is_reported_at_once():
    with pytest.raises(ConfigError) as raised:
        load_config(None, ["optim.lrr=1", "rollout.group_size=abc", "eval.evry=2", "model.dtype=float17"])
    text = str(raised.value)
    assert text.startswith("4 problems in the config:")
    for part in ("did you mean 'optim.lr'", "rollout.group_size: expected an integer", "did you mean 'eval.every'"):
        assert part in text
    assert "model.dtype: 'float17' is not one of" in text


@pytest.mark.parametrize(("command", "hint"), [("train", "--resume"), ("compare", "run the same command again")])
def test_ctrl_c_says_how_to_continue(command, hint, monkeypatch, capsys):
    import importlib

    from orsd_gym.cli import main

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(importlib.import_module(f"orsd_gym.cli.{command}"), "run", interrupted)
    assert main([command, "--config", "demo"]) == 130
    assert hint in capsys.readouterr().err


def test_every_setting_has_help_text():
    from orsd_gym.algos.base import algorithm_config_class, registered_algorithms
    from orsd_gym.confighelp import missing_help

    assert missing_help(Config) == []
    for name in registered_algorithms():
        assert missing_help(algorithm_config_class(name)) == [], name


def test_config_explain_prints_a_settings_help_type_default_and_value(capsys):
    from orsd_gym.cli import main

    assert main(["config", "explain", "optim.lr", "optim.lr=3e-5"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("optim.lr = 3e-05\n") and "default: 1e-05" in out and "AdamW learning rate" in out
    # An algorithm's settings as a run of it gets them: its base's entry included.
    assert main(["config", "explain", "algo.per_algo.orsd.kl_coef", "algo.per_algo.grpo.kl_coef=0.02"]) == 0
    assert capsys.readouterr().out.startswith("algo.per_algo.orsd.kl_coef = 0.02\n")
    # A section: each setting with its whole help, "e.g." and what follows it included.
    assert main(["config", "explain", "warm_start"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("warm_start.episodes = 0\n  Expert episodes on training tasks")
    assert [line.split(" = ")[0] for line in out.splitlines() if not line.startswith(" ")] == [
        f"warm_start.{item.name}" for item in dataclasses.fields(WarmStartConfig)
    ]
    assert main(["config", "explain", "env"]) == 0
    words = " ".join(capsys.readouterr().out.split())
    assert " ".join(field_help(EnvConfig)["kwargs"].split()) in words and "e.g." in words
    # Overrides may also come after an option, in every command that takes them.
    assert main(["config", "explain", "optim.lr", "--config", "demo", "optim.lr=4e-5"]) == 0
    assert capsys.readouterr().out.startswith("optim.lr = 4e-05\n")
    assert main(["config", "show", "optim.lr=5e-5", "--config", "demo", "train.iterations=3"]) == 0
    shown = capsys.readouterr().out
    assert "lr: 5.0e-05" in shown and "iterations: 3" in shown
    assert main(["config", "explain", "optim.lrr"]) == 2
    assert "optim has no setting 'lrr'; it has lr," in capsys.readouterr().err


def test_a_nested_setting_of_an_algorithm_keeps_the_rest_of_its_bases_mapping(capsys, tmp_path):
    """webshop_cpu gives GRPO (and so ORSD) a reward mapping; one nested key under ORSD's own
    entry changes that key only, in a run's config, in `config explain` and in a comparison's arm."""
    from orsd_gym.cli import main
    from orsd_gym.experiments.compare import Arm, run_config

    config = load_config("webshop_cpu", ["algo.name=orsd", "algo.per_algo.orsd.reward.no_progress_penalty=0.2"])
    reward = resolve_algo(config).reward
    assert (reward.outcome, reward.invalid_action_penalty, reward.no_progress_penalty) == ("return", 0.1, 0.2)
    assert main(["config", "explain", "algo.per_algo.orsd.reward", "--config", "webshop_cpu"]) == 0
    assert "reward.outcome = 'return'" in capsys.readouterr().out
    base = load_config("webshop_cpu", ["model.name=tiny-random"])
    arm = run_config(base, Arm.parse("orsd@reward.no_progress_penalty=0.3"), 0, tmp_path)
    reward = resolve_algo(arm).reward
    assert (reward.outcome, reward.invalid_action_penalty, reward.no_progress_penalty) == ("return", 0.1, 0.3)


def test_merge_is_key_by_key_and_leaves_its_inputs_alone():
    base = {"a": {"x": 1, "y": {"p": 1}}, "b": 2}
    merged = configio.merge(base, {"a": {"y": {"q": 2}}}, {"b": 3, "c": {"z": 1}})
    assert merged == {"a": {"x": 1, "y": {"p": 1, "q": 2}}, "b": 3, "c": {"z": 1}}
    assert base == {"a": {"x": 1, "y": {"p": 1}}, "b": 2}
    # A mapping replaces a non-mapping and the other way round.
    assert configio.merge({"a": 1}, {"a": {"x": 1}}) == {"a": {"x": 1}}
    assert configio.merge({"a": {"x": 1}}, {"a": None}) == {"a": None}
