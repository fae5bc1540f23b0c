"""orsd-gym: RL for LLM agents on multi-turn text environments (GRPO and ORSD).

``import orsd_gym`` registers the ``orsd_gym/*`` Gymnasium envs; heavy dependencies (torch,
transformers, TextWorld) load only when a policy or an env that needs them is made.
"""

from orsd_gym import envs as envs  # noqa: F401  (registers the built-in envs)

__version__ = "0.1.0"
