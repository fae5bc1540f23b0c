"""A user-registered env whose reward varies with whatever text the model writes, so even a
random tiny model gets non-zero GRPO advantages (used by the trainer's resume tests)."""

from __future__ import annotations

from orsd_gym.envs import StepOutcome, TextEnv, register_text_env


class VowelEnv(TextEnv):
    """Reward = share of vowels in the action (one step per episode). It declares no
    training/held-out partition, like most users' first envs."""

    themes = ("animal", "colour", "city", "food", "tool", "plant", "river", "song", "game", "name")

    def __init__(self, expert: bool | str = False, render_mode: str | None = None) -> None:
        super().__init__(render_mode=render_mode)
        #: "reset" or True: the reset info holds an expert plan that names the task's theme, so
        #: ORSD's expert and shuffled rubric sources can run on this env.
        self.expert = expert

    @property
    def tasks(self):
        return self.themes

    def _task_text(self, task_id):
        return f"Write a {self.themes[task_id]} word with many vowels."

    def _start_task(self, task_id, options):
        info = {"expert_actions": [f"name a {self.themes[task_id]} like aurelia"]} if self.expert else {}
        return f"Your task is to: {self._task_text(task_id).lower()}", info

    def _play(self, action):
        letters = [c for c in action.lower() if c.isalpha()]
        score = sum(c in "aeiou" for c in letters) / max(1, len(letters))
        return StepOutcome(f"Score {score:.2f}.", reward=score, terminated=True, won=score > 0.5)


ENV_ID = register_text_env("VowelTest", f"{__name__}:VowelEnv", max_episode_steps=1, description="test env")

#: A small GRPO run on this env in which every iteration updates (the reward is the action's
#: vowel share, so groups are mixed); tests add their iterations, evaluation and output directory.
SMALL_RUN = (
    "model.name=tiny-random",
    f"env.id=resumable_env:{ENV_ID}",
    "rollout.tasks_per_iteration=2",
    "rollout.group_size=2",
    "rollout.max_turns=1",
    "rollout.max_new_tokens=6",
    "rollout.action_format=last_line",
    "algo.per_algo.grpo={reward: {outcome: return}}",
)
