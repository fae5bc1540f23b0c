"""``orsd-gym config show``: the resolved config a command would run, as YAML;
``orsd-gym config explain KEY``: what a setting (or every setting of a section) means."""

from __future__ import annotations

import argparse
import copy
import dataclasses
from typing import Any

import yaml

from orsd_gym.algos.base import algorithm_config_class
from orsd_gym.confighelp import describe, explain_field
from orsd_gym.errors import ConfigError, UnknownAlgorithmError
from orsd_gym.probes import probes_for, run_records
from orsd_gym.train.config import Config, load_config, resolve_algo


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    show = actions.add_parser(
        "show",
        help="print the resolved config (every default included)",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    explain = actions.add_parser(
        "explain",
        help="what a setting means, its type, default and value (a section: each of its settings)",
        description="e.g. `orsd-gym config explain optim.lr`, `... explain eval`, `... explain algo.per_algo.orsd`, "
        "`... explain probes`",
    )
    explain.add_argument("key", help="a dotted setting or section, e.g. optim.lr, eval, algo.per_algo.orsd.beta")
    for action in (show, explain):
        action.add_argument("--config", help="YAML config file or the name of a shipped config (default: the defaults)")
        action.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="dotted overrides, e.g. optim.lr=1e-5")


def run(args: argparse.Namespace) -> int:
    config = load_config(args.config, args.overrides)
    if args.action == "explain":
        print(explain(config, args.key))
        return 0
    print(yaml.safe_dump(run_records(config)[0], sort_keys=False), end="")
    return 0


def explain(config: Config, key: str) -> str:
    """The help of ``key`` in ``config``: a setting's in full, a section's for each of its settings.
    ``algo.per_algo.<algorithm>`` reads that algorithm's settings as its runs would get them."""
    cls, value, walked = Config, config, []
    parts = key.split(".") if key else []
    while parts:
        name = parts.pop(0)
        if cls is Config and name == "probes":
            return _explain_probes(config, parts, key)
        if cls is type(config.algo) and name == "per_algo":
            if not parts:
                return describe(type(config.algo), config.algo, "algo.")
            algorithm = parts.pop(0)
            value = _algorithm_settings(config, algorithm)
            cls = type(value)
            walked += ["per_algo", algorithm]
            continue
        names = [f.name for f in dataclasses.fields(cls)]
        if name not in names:
            where = ".".join(walked) or "the config"
            raise ConfigError(f"{key}: {where} has no setting {name!r}; it has {', '.join(names)}")
        field_value = getattr(value, name)
        if not dataclasses.is_dataclass(field_value):
            if parts:
                raise ConfigError(f"{key}: {'.'.join([*walked, name])} is a setting, not a section")
            return explain_field(cls, name, field_value, key)
        cls, value = type(field_value), field_value
        walked.append(name)
    return describe(cls, value, ".".join(walked) + "." if walked else "")


def _explain_probes(config: Config, parts: list[str], key: str) -> str:
    """``probes``: every probe's settings; ``probes.<section>``: one probe's; then one setting."""
    sections = {probe.section: probe.settings for probe in probes_for(config) if probe.section is not None}
    if not parts:
        return "\n".join(describe(type(value), value, f"probes.{name}.") for name, value in sections.items())
    section = parts.pop(0)
    if section not in sections:
        raise ConfigError(f"{key}: no probe reads probes.{section}; probes: {', '.join(sections)}")
    value = sections[section]
    if not parts:
        return describe(type(value), value, f"probes.{section}.")
    names = [f.name for f in dataclasses.fields(value)]
    if parts[0] not in names or len(parts) > 1:
        raise ConfigError(f"{key}: probes.{section} has no setting {'.'.join(parts)!r}; it has {', '.join(names)}")
    return explain_field(type(value), parts[0], getattr(value, parts[0]), key)


def _algorithm_settings(config: Config, algorithm: str) -> Any:
    """The settings of ``algorithm`` as a run of it with this config would get them."""
    try:
        algorithm_config_class(algorithm)
    except UnknownAlgorithmError as error:
        raise ConfigError(f"algo.per_algo.{algorithm}: {error}") from None
    arm = copy.deepcopy(config)
    arm.algo.name = algorithm
    return resolve_algo(arm)
