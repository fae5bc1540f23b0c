"""The probes' own config section: old spellings (files, overrides, recorded runs) load as the
new one, a recorded run compares equal under it, and a run recorded with it resumes."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from resumable_env import SMALL_RUN

from orsd_gym import configio
from orsd_gym.cli.config import explain
from orsd_gym.probes import probes_for, run_records
from orsd_gym.train.config import PREDATING_BEHAVIOUR, Config, default_record, load_config, run_record
from orsd_gym.train.rundir import config_differences
from orsd_gym.train.trainer import Trainer

RECORDED = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "orsd_study_v2" / "runs" / "orsd-seed0"

OLD_TO_NEW = {
    ("eval", "teacher_test"): ("teacher", "test"),
    ("eval", "teacher_rubric_file"): ("teacher", "rubric_file"),
    ("eval", "teacher_placement"): ("teacher", "placement"),
    ("eval", "teacher_max_criteria"): ("teacher", "max_criteria"),
    ("eval", "teacher_episodes"): ("teacher", "episodes"),
    ("optim", "gradient_share_every"): ("gradient_share", "every"),
    ("warm_start", "rubric_share"): ("rubric_demonstrations", "share"),
    ("warm_start", "rubric_placement"): ("rubric_demonstrations", "placement"),
    ("warm_start", "rubric_max_criteria"): ("rubric_demonstrations", "max_criteria"),
}


def _settings(config: Config) -> dict:
    return {probe.section: probe.settings for probe in probes_for(config)}


def test_old_spellings_in_a_file_and_in_overrides_load_as_the_probes_settings(tmp_path, capsys):
    old = tmp_path / "old.yaml"
    old.write_text(
        yaml.safe_dump(
            {
                "eval": {"teacher_test": "expert", "teacher_max_criteria": 3, "env_kwargs": {"expert": "reset"}},
                "warm_start": {"rubric_share": 0.5, "rubric_placement": "user"},
            }
        )
    )
    config = load_config(old, ["optim.gradient_share_every=2", "eval.teacher_episodes=4"])
    assert "note: settings renamed" in capsys.readouterr().err
    new = load_config(
        None,
        [
            "eval.env_kwargs={expert: reset}",
            "probes.teacher={test: expert, max_criteria: 3, episodes: 4}",
            "probes.rubric_demonstrations={share: 0.5, placement: user}",
            "probes.gradient_share.every=2",
        ],
    )
    assert config == new
    settings = _settings(config)
    assert (settings["teacher"].test, settings["teacher"].max_criteria, settings["teacher"].episodes) == (
        "expert",
        3,
        4,
    )
    assert settings["gradient_share"].every == 2 and settings["rubric_demonstrations"].placement == "user"
    assert run_records(config) == run_records(new)


def test_a_recorded_run_with_the_old_spelling_loads_and_compares_equal():
    """A recorded study run (written before the probes had a section) loads as a config, and a
    run of that config records what the recorded one did: resuming it or reading it as a
    finished run of a comparison finds no difference."""
    saved = yaml.safe_load((RECORDED / "config.yaml").read_text())
    assert saved["eval"]["teacher_test"] == "expert" and "probes" not in saved
    # What the run did for settings it predates (`PREDATING_BEHAVIOUR`), as a resume compares it.
    config = configio.from_dict(Config, configio.merge(PREDATING_BEHAVIOUR, saved))
    settings = _settings(config)
    assert (settings["teacher"].test, settings["teacher"].placement, settings["teacher"].max_criteria) == (
        "expert",
        "system",
        3,
    )
    assert settings["gradient_share"].every == 1 and settings["rubric_demonstrations"].share == 0.5
    record, defaults = run_records(config)
    assert config_differences(saved, record, defaults) == {}
    # A real difference still shows, under the new spelling.
    changed = {**record, "probes": {**record["probes"], "gradient_share": {"every": 3}}}
    assert config_differences(saved, changed, defaults) == {"probes.gradient_share.every": (1, 3)}


def test_a_run_recorded_with_the_old_spelling_resumes_with_the_same_settings(tmp_path):
    run = [
        *SMALL_RUN,
        "eval.every=0",
        "eval.num_tasks=1",
        "probes.gradient_share.every=1",
        "train.threads=1",
        "logging.live=false",
        "logging.tensorboard=false",
    ]
    config = load_config(None, [*run, "train.iterations=2", f"train.output_dir={tmp_path / 'whole'}"])
    Trainer(config, callbacks=probes_for(config)).run()
    run.append(f"train.output_dir={tmp_path / 'run'}")
    config = load_config(None, [*run, "train.iterations=1"])
    Trainer(config, callbacks=probes_for(config)).run()
    # The run's record as a version before the probes' section wrote it.
    saved = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    probes = saved.pop("probes")
    assert probes["gradient_share"] == {"every": 1}
    for (section, old), (probe, new) in OLD_TO_NEW.items():
        saved[section][old] = probes[probe][new]
    (tmp_path / "run" / "config.yaml").write_text(yaml.safe_dump(saved))

    config = load_config(None, [*run, "train.iterations=2"])
    summary = Trainer(config, resume=True, allow_changes=["train.iterations"], callbacks=probes_for(config)).run()
    assert summary.resumed_from == 1
    resumed, whole = (_metrics(tmp_path / name) for name in ("run", "whole"))
    assert resumed == whole and [line["iteration"] for line in resumed] == [1, 2]
    assert all(line["grad_share/skipped"] == 0.0 for line in resumed)  # the probe ran in both, as set


def _metrics(run: Path) -> list[dict]:
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in line.items() if not k.startswith("time/")} for line in lines]


def test_config_explain_shows_the_probes_help():
    config = load_config(None, [])
    every = explain(config, "probes.gradient_share.every")
    assert every.startswith("probes.gradient_share.every = 0") and "0: never" in every
    listed = explain(config, "probes")
    for key in ("probes.teacher.test", "probes.teacher.episodes", "probes.rubric_demonstrations.share"):
        assert key in listed


def test_a_resume_may_switch_a_measurement_on_when_allowed_under_either_spelling():
    import argparse

    from orsd_gym.cli.options import allowed_changes
    from orsd_gym.train.callbacks import safe_changes

    safe = safe_changes(probes_for(load_config(None, [])))
    assert {"probes.teacher.test", "probes.gradient_share.every"} <= safe
    assert "probes.teacher.episodes" not in safe and "probes.rubric_demonstrations.share" not in safe
    old = argparse.Namespace(allow_change="eval.teacher_test,optim.gradient_share_every,train.iterations")
    assert allowed_changes(old) == ["probes.teacher.test", "probes.gradient_share.every", "train.iterations"]


def test_every_probe_setting_has_help():
    from orsd_gym.confighelp import missing_help
    from orsd_gym.probes import PROBES

    for probe in PROBES:
        assert missing_help(probe.Settings) == [], probe.section


def test_a_process_without_probes_resumes_a_run_recorded_with_them():
    # Recorded by `orsd-gym train` (its probes' settings saved), resumed by a Trainer built
    # without callbacks: the probes' settings say what was measured, not what is trained.
    config = load_config(None, ["model.name=tiny-random"])
    with_probes, defaults = run_records(config)
    assert "probes" in with_probes
    assert config_differences(with_probes, run_record(config), default_record(config.algo.name)) == {}
    # Two processes that both measure still compare every probe setting.
    changed = load_config(None, ["model.name=tiny-random", "probes.teacher.episodes=2"])
    assert set(config_differences(with_probes, run_records(changed)[0], defaults)) == {"probes.teacher.episodes"}
