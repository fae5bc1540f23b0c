"""ORSD's settings (``algo.per_algo.orsd.*``): GRPO's, then ORSD's own in the order a batch
meets them: where candidate rubrics come from, how the policy writes them, how the verifier
judges and one is selected, how the replay measures delta, and how delta shapes the advantage.

The settings stay one flat section, so ``algo.per_algo.orsd.beta`` is spelt as every recorded
run spells it; the comments below only group them. Why beta and delta_clip default as they
do: the `orsd_gym.algos.orsd.algorithm` module docstring.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from orsd_gym.algos.grpo import GRPOConfig
from orsd_gym.algos.orsd.replay import DEFAULT_RUBRIC_TEMPLATE, DeltaBaseline, Placement
from orsd_gym.algos.orsd.rubrics import (
    DEFAULT_OFFLINE_PROPOSAL_TEMPLATE,
    DEFAULT_PROPOSAL_SYSTEM,
    DEFAULT_PROPOSAL_TEMPLATE,
)
from orsd_gym.algos.orsd.verifier import DEFAULT_VERIFIER_SYSTEM, DEFAULT_VERIFIER_TEMPLATE, Scoring

#: Where candidate rubrics come from (`orsd_gym.algos.orsd.sources`).
RubricSource = Literal["policy", "expert", "shuffled", "file"]
#: When the policy writes them (`orsd_gym.algos.orsd.proposer`).
RubricMode = Literal["online", "offline"]


@dataclass
class ORSDConfig(GRPOConfig):
    """GRPO's settings plus ORSD's (see the module docstring for the beta / delta_clip defaults)."""

    # ---- where candidate rubrics come from, and when they are written

    #: Where candidate rubrics come from (`orsd_gym.algos.orsd.sources`): the method ("policy") or
    #: a control ("expert", "shuffled") or a person's file ("file", with ``rubric_file``).
    rubric_source: RubricSource = "policy"
    #: With rubric_source "file": YAML mapping task keys (or "*") to lists of criteria.
    rubric_file: str | None = None
    #: What a "shuffled" source lends to other tasks: expert bundles or the policy's selected ones.
    shuffled_from: Literal["expert", "policy"] = "expert"
    #: "online": rubrics written from each group's attempts; "offline": written once per task from the task
    #: alone.
    rubric_mode: RubricMode = "online"

    # ---- the rubric writer (rubric_source "policy")

    #: Candidate bundles per group (K) and criteria per bundle (M, at most).
    num_bundles: int = 4
    #: Criteria per candidate bundle, at most (M).
    max_criteria: int = 4
    #: Sampling temperature of the rubric proposals (0: greedy, all K alike).
    proposal_temperature: float = 1.0
    #: Enough for M=4 one-line criteria; every extra token is paid K times per group.
    proposal_max_new_tokens: int = 96
    #: System prompt of the rubric writer.
    proposal_system: str = DEFAULT_PROPOSAL_SYSTEM
    #: Placeholders: {task}, {attempts}, {num_attempts}, {max_criteria}.
    proposal_template: str = DEFAULT_PROPOSAL_TEMPLATE
    #: Task-only prompt of ``rubric_mode: offline`` (same placeholders, no attempts).
    offline_proposal_template: str = DEFAULT_OFFLINE_PROPOSAL_TEMPLATE
    #: Token budget of a proposal prompt: attempts show fewer steps until it fits.
    proposal_max_context_tokens: int = 3072
    #: How attempts are shown to the proposer and the verifier.
    attempt_max_obs_chars: int = 120
    #: Steps of each attempt shown, at most (fewer when the prompt would not fit).
    attempt_max_steps: int = 16

    # ---- the verifier and the selection

    #: How the verifier scores a criterion: "prob" (P(yes) renormalised over yes and no) or
    #: "binary" (1 when yes is the likelier answer, else 0).
    verifier_scoring: Scoring = "prob"
    #: System prompt of the verifier.
    verifier_system: str = DEFAULT_VERIFIER_SYSTEM
    #: Placeholders: {task}, {attempt}, {criterion}.
    verifier_template: str = DEFAULT_VERIFIER_TEMPLATE
    #: Verifier contexts per `next_token_logprobs` call.
    verifier_chunk_size: int = 64
    #: A bundle is selected only if its correlation is above this (strictly).
    min_corr: float = 0.0
    #: "reward": the bundle whose scores correlate best with the rewards; "random": any bundle (a control).
    selection: Literal["reward", "random"] = "reward"

    # ---- the replay (delta: the rubric's per-token log-likelihood ratio)

    #: Where the replay puts the selected rubric: the system prompt, the first user message, or restated before
    #: every turn ("turn").
    rubric_placement: Placement = "system"
    #: Placeholder: {rubric} (the selected criteria as a bulleted list).
    rubric_template: str = DEFAULT_RUBRIC_TEMPLATE
    #: Where delta's "without rubric" log-probs come from: "rollout" (the sampler's own where it
    #: samples in float32: no extra pass; else a float32 pass) or "rescore" (always a float32
    #: pass of the original sequences). Both sides of delta are computed in the weights' own
    #: precision (float32 in the mixed-precision presets), whatever `update_dtype` is; "auto" is "rollout".
    delta_baseline: DeltaBaseline | Literal["auto"] = "auto"

    # ---- the shaping (A_t = A_GRPO + beta * clip(delta_t, -c, c))

    #: Weight of the correction delta added to the GRPO advantage (its meaning depends on `delta_scale`).
    beta: float = 0.1
    #: Each token's delta is clipped to [-delta_clip, delta_clip] nats before it is scaled.
    delta_clip: float = 1.0
    #: Subtract each trajectory's mean delta (removes a rubric's uniform shift of every token;
    #: the ``normalized`` scale is then measured on the centred delta).
    center_delta: bool = False
    #: "raw": the correction is ``beta * clip(delta)`` in nats; "normalized": each group's delta is
    #: rescaled so its mean |clip(delta)| equals the group's mean |advantage| (`group_delta_scale`),
    #: making ``beta`` the correction's share of a typical advantage. Its share of the *gradient*
    #: is larger: the delta sits on the uncertain tokens, where log-prob gradients are largest
    #: (benchmarks/README.md, the beta study: keep beta small with "normalized").
    #: "bounded": "normalized", then each token's correction capped at ``correction_bound`` times
    #: its outcome advantage (`orsd_gym.algos.orsd.shaping`), so on every token the correction can
    #: move credit but never outweigh or reverse the outcome's push. That bounds it per token, not
    #: its share of the gradient: where attempts share tokens the outcome's terms cancel and the
    #: correction's can add up.
    delta_scale: Literal["raw", "normalized", "bounded"] = "raw"
    #: With delta_scale "bounded": each token's correction is at most this fraction of its |advantage|, in [0,
    #: 1).
    correction_bound: float = 0.5

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in (
            "num_bundles",
            "max_criteria",
            "proposal_max_new_tokens",
            "verifier_chunk_size",
            "attempt_max_steps",
            "proposal_max_context_tokens",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.proposal_temperature < 0:
            raise ValueError(f"proposal_temperature must be >= 0, got {self.proposal_temperature}")
        if self.beta < 0 or self.delta_clip <= 0:
            raise ValueError(f"need beta >= 0 and delta_clip > 0, got {self.beta}, {self.delta_clip}")
        if not 0.0 <= self.correction_bound < 1.0:
            raise ValueError(f"correction_bound is a fraction of |advantage| in [0, 1), got {self.correction_bound}")
        if not -1.0 <= self.min_corr <= 1.0:
            raise ValueError(f"min_corr is a correlation threshold in [-1, 1], got {self.min_corr}")
        if (self.rubric_source == "file") != (self.rubric_file is not None):
            raise ValueError("rubric_file is needed by rubric_source='file' and used by it only")
        if self.rubric_mode == "offline" and self.rubric_source != "policy":
            raise ValueError("rubric_mode='offline' applies to rubric_source='policy' only")

    @property
    def needs_verifier(self) -> bool:
        return True

    @property
    def needs_expert_plans(self) -> bool:
        """The rubric source reads the env's expert plan from each trajectory's reset info."""
        return self.rubric_source == "expert" or (self.rubric_source == "shuffled" and self.shuffled_from == "expert")
