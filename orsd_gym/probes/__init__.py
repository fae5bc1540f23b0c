"""Probes: measurements a run makes beside training, as the trainer's callbacks.

Each probe is a `orsd_gym.train.callbacks.TrainerCallback` with its own config section,
``probes.<section>``; ``probes_for(config)`` gives a run every registered probe with its
settings (a probe whose settings leave it off does nothing), and the code that starts a run
hands them to the trainer (`orsd_gym.train.launch.train(config, callbacks=...)`, which the
``train`` and ``compare`` commands call). Built in:

* ``teacher`` (`orsd_gym.probes.teacher`): does the policy act better with a rubric in context?
* ``gradient_share`` (`orsd_gym.probes.grad_share`): the outcome's and ORSD's correction's
  share of an update's gradient;
* ``rubric_demonstrations`` (`orsd_gym.probes.rubric_demonstrations`): a share of the warm
  start's demonstrations with their task's expert rubric in context.

A comparison's report reads their measures as ORSD's chain of links (`orsd_gym.probes.chain`).

An algorithm adds its own with `register_probe` (see the README's "Contributing").
"""

from __future__ import annotations

from typing import Any

from orsd_gym import configio
from orsd_gym.probes.grad_share import GradientShareProbe
from orsd_gym.probes.rubric_demonstrations import RubricDemonstrations
from orsd_gym.probes.teacher import TeacherProbe
from orsd_gym.train.callbacks import TrainerCallback, check_sections, settings_record
from orsd_gym.train.config import default_record, resolve_algo, run_record

#: The registered probes, in the order the trainer calls them.
PROBES: list[type[TrainerCallback]] = [TeacherProbe, GradientShareProbe, RubricDemonstrations]


def register_probe(probe: type[TrainerCallback]) -> type[TrainerCallback]:
    """Register a probe class (usable as a decorator); its ``section`` must be new."""
    if probe.section is not None and probe.section in {p.section for p in PROBES if p is not probe}:
        raise ValueError(f"a probe with section {probe.section!r} is already registered")
    if probe not in PROBES:
        PROBES.append(probe)
    return probe


def probe_settings_class(section: str) -> type:
    """The settings dataclass of the probe registered for ``probes.<section>``."""
    for probe in PROBES:
        if probe.section == section and probe.Settings is not None:
            return probe.Settings
    registered = ", ".join(p.section for p in PROBES if p.section)
    raise KeyError(f"no probe reads probes.{section} (registered: {registered})")


def probes_for(config: Any) -> list[TrainerCallback]:
    """Every registered probe with its settings from ``config.probes`` (validated: an unknown
    section, key or value is a `ConfigError` naming it)."""
    made = [
        probe(
            configio.from_dict(probe.Settings, config.probes.get(probe.section), prefix=f"probes.{probe.section}.")
            if probe.Settings is not None
            else None
        )
        for probe in PROBES
    ]
    check_sections(config.probes, made)
    return made


def check_probes(config: Any) -> None:
    """What `probes_for` checks, and each probe's `check_config` (before anything loads)."""
    settings = resolve_algo(config)
    for probe in probes_for(config):
        probe.check_config(config, settings)


def run_records(config: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """What a run of ``config`` records (its probes' settings included) and the default record
    that stands in for settings a saved run predates (`orsd_gym.train.config.run_record`)."""
    probes = probes_for(config)
    return (
        run_record(config, settings_record(probes)),
        default_record(config.algo.name, settings_record(probes, defaults=True)),
    )


__all__ = [
    "PROBES",
    "TrainerCallback",
    "check_probes",
    "probe_settings_class",
    "probes_for",
    "register_probe",
    "run_records",
]
