"""`FillActionTemplates`: replace placeholder actions in ``info["admissible_actions"]`` with concrete ones.

Some envs list an action *template* among their admissible actions: WebShop's search page offers
``search[<your query>]``. Played as is, it searches for the words "your query". An agent that
only chooses among listed actions (`AdmissibleChoice`) needs a concrete action there instead.
The env says which of its actions are templates and how to fill them
(`TextEnv.action_templates`, `orsd_gym.envs.presentation`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym

from orsd_gym.envs.presentation import TemplateFiller


class FillActionTemplates(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Rewrite each admissible action that is a key of ``fillers`` into ``fillers[action](info)``
    (None: the env's own `action_templates`).

    Only ``info["admissible_actions"]`` changes; the env still accepts any string. Fillers must be
    picklable (module-level functions) for subprocess vector envs.
    """

    def __init__(self, env: gym.Env, fillers: Mapping[str, TemplateFiller] | None = None) -> None:
        gym.utils.RecordConstructorArgs.__init__(self, fillers=fillers)
        gym.Wrapper.__init__(self, env)
        own = getattr(type(env.unwrapped), "action_templates", {})
        self.fillers = dict(own if fillers is None else fillers)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        observation, info = self.env.reset(seed=seed, options=options)
        return observation, self._fill(info)

    def step(self, action: Any):
        observation, reward, terminated, truncated, info = self.env.step(action)
        return observation, reward, terminated, truncated, self._fill(info)

    def _fill(self, info: dict[str, Any]) -> dict[str, Any]:
        return fill_templates(info, self.fillers)


def fill_templates(info: dict[str, Any], fillers: Mapping[str, TemplateFiller]) -> dict[str, Any]:
    """``info`` with each admissible action that is a key of ``fillers`` made concrete (a copy
    when anything changes; ``info`` itself otherwise)."""
    admissible = info.get("admissible_actions") or []
    if not any(action in fillers for action in admissible):
        return info
    info = dict(info)
    info["admissible_actions"] = [fillers[action](info) if action in fillers else action for action in admissible]
    return info
