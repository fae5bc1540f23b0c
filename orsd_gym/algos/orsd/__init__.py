"""ORSD (Online Rubric Self-Distillation): rubrics, verifier, selection, replay, shaping."""

from orsd_gym.algos.orsd.algorithm import ORSD
from orsd_gym.algos.orsd.config import ORSDConfig
from orsd_gym.algos.orsd.rubrics import format_rubric, parse_criteria, render_attempt
from orsd_gym.algos.orsd.selection import bundle_correlations, rankdata, select_bundle, select_random_bundle, spearman
from orsd_gym.algos.orsd.shaping import shape_advantages

__all__ = [
    "ORSD",
    "ORSDConfig",
    "bundle_correlations",
    "format_rubric",
    "parse_criteria",
    "rankdata",
    "render_attempt",
    "select_bundle",
    "select_random_bundle",
    "shape_advantages",
    "spearman",
]
