"""Text Gymnasium environments: the contract, the registry and the built-in envs.

Importing this package registers the built-in envs with lazy entry points; it imports neither
an env's engine (TextWorld, the WebShop catalog) nor torch.
"""

from orsd_gym.envs.adapters import adapter_description
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
# Other libraries' envs (optional extras; see orsd_gym.envs.adapters).
register_text_env(
    "ReasoningGym",
    "orsd_gym.envs.adapters.reasoning_gym_env:ReasoningGymEnv",
    description=adapter_description(
        "reasoning-gym datasets, one question per episode (dataset=NAME).", "reasoning_gym", "reasoning-gym"
    ),
)
register_text_env(
    "TextArena",
    "orsd_gym.envs.adapters.textarena_env:TextArenaEnv",
    max_episode_steps=100,
    description=adapter_description("TextArena's single-player games (game=ID).", "textarena", "textarena"),
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
