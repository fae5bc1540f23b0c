"""Text Gymnasium environments: the contract, the registry and the built-in envs.

Importing this package registers the built-in envs with lazy entry points; it imports neither
an env's engine (TextWorld, the WebShop catalog) nor torch.
"""

from orsd_gym.envs.base import StepOutcome, TextEnv
from orsd_gym.envs.registry import TextEnvInfo, register_text_env, registered_text_envs
from orsd_gym.envs.spaces import UnicodeText
from orsd_gym.errors import TaskSelectionError

register_text_env(
    "ALFWorld",
    "orsd_gym.envs.alfworld.env:ALFWorldEnv",
    max_episode_steps=50,
    description="ALFWorld household tasks on the real TextWorld/PDDL engine (official games or generated tasks).",
)
register_text_env(
    "WebShop",
    "orsd_gym.envs.webshop.env:WebShopEnv",
    max_episode_steps=15,
    description="WebShop simulated shopping: BM25 search, product pages, the benchmark's purchase reward.",
)
register_text_env(
    "GuessNumber",
    "orsd_gym.envs.examples.guess_number:GuessNumberEnv",
    max_episode_steps=10,
    description="Example env: find a hidden number with higher/lower feedback (engine-free, fast).",
)

__all__ = [
    "StepOutcome",
    "TaskSelectionError",
    "TextEnv",
    "TextEnvInfo",
    "UnicodeText",
    "register_text_env",
    "registered_text_envs",
]
