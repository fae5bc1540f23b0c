"""Per-iteration seeds: each source of randomness of an iteration gets its own stream.

Everything random in iteration ``i`` of a run is drawn from ``SeedSequence([train.seed, i,
stream])``, so a resumed run replays exactly what the uninterrupted run would have done, and
two algorithms run with one seed see the same tasks and the same sampling seeds.
"""

from __future__ import annotations

import numpy as np

#: The streams (``TASKS`` draws the iteration's training tasks, see `orsd_gym.train.plan`;
#: ``TEACHER`` the teacher test's, `orsd_gym.probes.teacher`; ``GRAD_SHARE`` which micro-batch
#: `orsd_gym.probes.grad_share` measures).
TASKS, ROLLOUT, ALGO, EVAL, UPDATE, TEACHER, GRAD_SHARE = 0, 1, 2, 3, 4, 5, 6


def iteration_seed(base_seed: int, iteration: int, stream: int) -> int:
    """A 31-bit seed for one stream of one iteration, independent across streams."""
    return int(np.random.SeedSequence([base_seed, iteration, stream]).generate_state(1)[0] & 0x7FFFFFFF)


def iteration_rng(base_seed: int, iteration: int, stream: int, *more: int) -> np.random.Generator:
    """A numpy Generator for one stream of one iteration (``more`` splits it further)."""
    return np.random.default_rng(np.random.SeedSequence([base_seed, iteration, stream, *more]))
