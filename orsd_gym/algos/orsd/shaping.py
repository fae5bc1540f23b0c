"""Adding the scaled, clipped privileged log-likelihood ratio to the GRPO advantage."""

from __future__ import annotations

import torch


def shape_advantages(
    adv: torch.Tensor,
    delta: torch.Tensor,
    mask: torch.Tensor,
    beta: float,
    clip: float,
    *,
    center: bool = False,
    scale: float = 1.0,
) -> torch.Tensor:
    """``adv + beta * scale * clip(delta, -clip, clip)`` on mask-1 tokens; mask-0 tokens keep ``adv``.

    With ``center`` the delta is first mean-centred over the response's mask-1 tokens, so the
    correction only redistributes credit between tokens (its sum is 0 before clipping).
    ``scale`` is the group's normalisation (`group_delta_scale`; 1 leaves delta in nats). No
    gradient flows through ``delta``.
    """
    if not (adv.shape == delta.shape == mask.shape):
        raise ValueError(f"adv, delta and mask must have one shape, got {adv.shape}, {delta.shape}, {mask.shape}")
    if beta < 0 or clip <= 0:
        raise ValueError(f"need beta >= 0 and clip > 0, got beta={beta}, clip={clip}")
    m = mask.to(adv.dtype)
    d = torch.where(m > 0, delta.detach().to(adv.dtype), torch.zeros_like(adv))
    if not torch.isfinite(d).all():
        raise ValueError("delta has NaN or inf on mask-1 tokens; the replay log-probs are broken")
    if center:
        count = m.sum()
        if count > 0:
            d = (d - d.sum() / count) * m
    return adv + beta * scale * torch.clamp(d, -clip, clip) * m


def group_delta_scale(advantages: list[float], clipped_abs_deltas: torch.Tensor) -> float:
    """The ``normalized`` delta scale of one group: the mean |advantage| of its attempts over the
    mean |clip(delta)| of its sampled tokens, so ``beta`` is the correction's share of a typical
    advantage whatever the size of the log-likelihood gaps (0 when either is 0)."""
    spread = sum(abs(a) for a in advantages) / len(advantages) if advantages else 0.0
    size = float(clipped_abs_deltas.mean()) if clipped_abs_deltas.numel() else 0.0
    return spread / size if spread > 0 and size > 0 else 0.0
