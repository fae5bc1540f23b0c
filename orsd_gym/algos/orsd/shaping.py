"""Adding the scaled, clipped privileged log-likelihood ratio to the GRPO advantage.

The bounded correction (``bound`` = c in [0, 1)): each token's correction is capped at c times
that token's outcome advantage, |beta * scale * clip(delta_t)| <= c * |A_t|. What that
guarantees is per token:

* A_t + correction_t has the sign of A_t and a size in [(1 - c)|A_t|, (1 + c)|A_t|]: the
  correction can shift credit between the tokens of a response, never reverse the outcome's
  push on a token, and adds nothing where the outcome gives no signal (A_t = 0);
* at ratio 1 the correction's gradient is at most c times the *sum of the magnitudes* of the
  outcome's per-token terms, sum_t c |A_t| |grad log p_t|.

What it does not guarantee is a bound on the correction's share of the *gradient*. The outcome's
per-token terms cancel wherever attempts with opposite advantages share tokens (the same prompt
continuation in a success and a failure), while the correction's terms need not cancel: in a
group of two successes and two failures that share all but their last token, the correction's
gradient norm can be several times the outcome's. Nor does the bound make ORSD inert on groups
whose rewards are all equal: that comes from ORSD giving such groups no rubric (A_t = 0 there
too, so the cap is 0 either way).

Unbounded (``raw`` / ``normalized``) the correction is free to outgrow the outcome token by
token as well, which at 135M it did (its gradient 1.3-4.2x GRPO's at beta 0.05 normalised).
"""

from __future__ import annotations

import torch


def shape_advantages(
    adv: torch.Tensor,
    delta: torch.Tensor,
    mask: torch.Tensor,
    beta: float,
    clip: float,
    *,
    scale: float = 1.0,
    bound: float | None = None,
) -> torch.Tensor:
    """``adv + beta * scale * clip(delta, -clip, clip)`` on mask-1 tokens; mask-0 tokens keep ``adv``.

    ``bound`` (c in [0, 1)) caps each token's correction at ``c * |adv|`` (see the module docstring).
    ``scale`` is the group's normalisation (`group_delta_scale`; 1 leaves delta in nats), computed
    from the delta given here (a centred one: `centre_delta`). No gradient flows through ``delta``.
    """
    if not (adv.shape == delta.shape == mask.shape):
        raise ValueError(f"adv, delta and mask must have one shape, got {adv.shape}, {delta.shape}, {mask.shape}")
    if beta < 0 or clip <= 0:
        raise ValueError(f"need beta >= 0 and clip > 0, got beta={beta}, clip={clip}")
    if bound is not None and not 0.0 <= bound < 1.0:
        raise ValueError(f"the correction bound is a fraction of |advantage| in [0, 1), got {bound}")
    m = mask.to(adv.dtype)
    d = _on_mask(delta.to(adv.dtype), m)
    correction = beta * scale * torch.clamp(d, -clip, clip) * m
    if bound is not None:
        cap = bound * adv.abs()
        correction = torch.maximum(torch.minimum(correction, cap), -cap)
    return adv + correction


def centre_delta(delta: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``delta`` minus its mean over the response's mask-1 tokens (0 on mask-0 tokens): a
    rubric's uniform shift of every token removed, so the correction only moves credit between
    tokens (its sum is 0 before clipping). Centre before `group_delta_scale` measures the group:
    a scale measured on the uncentred delta would shrink a centred correction far below its
    documented size wherever the shift dominates."""
    m = mask.to(delta.dtype)
    d = _on_mask(delta, m)
    count = m.sum()
    return (d - d.sum() / count) * m if count > 0 else d


def _on_mask(delta: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``delta`` (detached) on mask-1 tokens, 0 elsewhere; refuses NaN or inf on mask-1 tokens."""
    d = torch.where(mask > 0, delta.detach(), torch.zeros_like(delta))
    if not torch.isfinite(d).all():
        raise ValueError("delta has NaN or inf on mask-1 tokens; the replay log-probs are broken")
    return d


def group_delta_scale(advantages: list[float], clipped_abs_deltas: torch.Tensor) -> float:
    """The ``normalized`` delta scale of one group: the mean |advantage| of its attempts over the
    mean |clip(delta)| of its sampled tokens, so ``beta`` is the correction's share of a typical
    advantage whatever the size of the log-likelihood gaps (0 when either is 0)."""
    spread = sum(abs(a) for a in advantages) / len(advantages) if advantages else 0.0
    size = float(clipped_abs_deltas.mean()) if clipped_abs_deltas.numel() else 0.0
    return spread / size if spread > 0 and size > 0 else 0.0
