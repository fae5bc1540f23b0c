"""Plain Gymnasium wrappers for orsd-gym's text envs (any env that keeps the text-env contract).

* `HistoryObservation`: the task, the last k steps and the current observation as one text.
* `AdmissibleChoice`: ``Discrete(K)`` choices among ``info["admissible_actions"]`` with encoded
  ``Dict`` observations and ``action_masks()`` (for stable-baselines3 / sb3-contrib).
* `TaskSchedule`: ``reset()`` plays a given list of tasks in a seeded order.
* `FillActionTemplates`: concrete actions in place of templates such as ``search[<your query>]``.
* Text encoders: `HashedBagOfWords` (weight-free, the default) and `ModelEncoder` (a frozen LM).
"""

from orsd_gym.errors import NoAdmissibleActionsError
from orsd_gym.wrappers.choice import EMPTY_SLOT_ACTION, AdmissibleChoice
from orsd_gym.wrappers.encoders import HashedBagOfWords, ModelEncoder, TextEncoder, make_encoder
from orsd_gym.wrappers.history import HistoryObservation
from orsd_gym.wrappers.tasks import TaskSchedule, reset_arguments
from orsd_gym.wrappers.templates import FillActionTemplates

__all__ = [
    "EMPTY_SLOT_ACTION",
    "AdmissibleChoice",
    "FillActionTemplates",
    "HashedBagOfWords",
    "HistoryObservation",
    "ModelEncoder",
    "NoAdmissibleActionsError",
    "TaskSchedule",
    "TextEncoder",
    "make_encoder",
    "reset_arguments",
]
