"""How an env is presented: to the acting model, to ORSD's rubric writer, as expert criteria,
and how its states are told apart.

Each env owns its presentation as `TextEnv` hooks (class attributes and class methods, so they
are read without making the env): its `EnvPrompt` (the system prompt, whether its admissible
actions are listed, the no-op action), its rubric worked examples (`WorkedExample`: a proposal
request for another task answered with a bundle, which helps a small model write one), how
its expert's plan reads as process criteria (`Criterion`) and what keys a state (`state_key`,
GiGPO's anchor states). The defaults here are generic: a plain prompt, no worked example,
criteria that quote the plan's actions, a state keyed by its observation text. Rollouts and
algorithms ask by env id (`prompt_for`, `examples_for`, `expert_criteria_for`, `state_key_for`)
and never name an env; an id that is not a `TextEnv` (any Gymnasium text env) gets the
defaults, or the prompt given to `register_env_prompt`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from orsd_gym.envs.lookup import env_class


@dataclass(frozen=True)
class EnvPrompt:
    """How observations of one env are presented to the model."""

    instructions: str = "You are an agent in a text environment. Complete the task by sending one action per turn."
    #: Append the env's admissible actions (when it reports them) to each observation.
    show_admissible: bool = True
    max_admissible: int = 40
    #: What ``on_unparsable="noop"`` sends.
    noop_action: str = "look"
    #: Show the admissible actions as a numbered list to choose from (what the "admissible"
    #: action format asks for: small models copy from a list far more reliably than they
    #: compose an action).
    numbered: bool = False


@dataclass(frozen=True)
class WorkedExample:
    """A rubric proposal request answered with a bundle, shown to the proposer before the real one."""

    #: The kind of task it is an example of (compared with ``info["task_type"]``: an example of
    #: the task's own kind could be copied as the answer).
    task_type: str
    task: str
    #: Attempts as ORSD's ``render_attempt`` shows them, one string per attempt.
    attempts: tuple[str, ...]
    bundle: tuple[str, ...] = field(default_factory=tuple)
    #: The object the example is about, chosen outside the env's own objects, so that a criterion
    #: naming it is a copy of the example, not about the task at hand (such criteria are dropped).
    thing: str = ""


@dataclass(frozen=True)
class Criterion:
    """One process criterion restating part of an expert plan."""

    text: str
    #: Plan index the criterion is about (criteria are listed in plan order).
    position: int
    #: Lower is kept first when a plan has more criteria than allowed.
    priority: int


def generic_criteria(actions: list[str], max_criteria: int) -> list[Criterion]:
    """Criteria for any env: evenly spaced actions of the plan from first to last (the last one
    usually completes the task) and, given three criteria or more, the order of the first and
    the last."""
    distinct = list(dict.fromkeys(actions))
    if len(distinct) <= max_criteria:
        return [Criterion(f'Does "{a}"', actions.index(a), 0) for a in distinct]
    count = max_criteria - 1 if max_criteria >= 3 else max_criteria
    picks = [len(distinct) - 1] if count == 1 else [round(k * (len(distinct) - 1) / (count - 1)) for k in range(count)]
    out = [Criterion(f'Does "{distinct[p]}"', actions.index(distinct[p]), 0) for p in picks]
    if max_criteria >= 3:
        out.append(Criterion(f'Does "{distinct[picks[0]]}" before "{distinct[picks[-1]]}"', len(actions), 1))
    return out


#: Prompts given for env ids by `register_env_prompt` (they win over the env's own).
_PROMPT_OVERRIDES: dict[str, EnvPrompt] = {}


def register_env_prompt(env_id: str, prompt: EnvPrompt) -> None:
    """Present ``env_id`` with ``prompt`` (over the env's own; for an env that is not a `TextEnv`)."""
    _PROMPT_OVERRIDES[env_id] = prompt


def presenter(env_id: str | None) -> Any:
    """The class that presents ``env_id``: its `TextEnv` class (every `TextEnv` is a
    `DefaultPresentation`), or `DefaultPresentation` itself."""
    return (env_class(env_id, DefaultPresentation) if env_id else None) or DefaultPresentation


#: Builds the concrete action for an admissible action *template* from the step's info.
TemplateFiller = Callable[[dict[str, Any]], str]


class DefaultPresentation:
    """The presentation of an env that says nothing about itself."""

    prompt = EnvPrompt()
    rubric_examples: tuple[WorkedExample, ...] = ()
    #: Admissible actions that are templates (WebShop's ``search[<your query>]``) and how an agent
    #: that only chooses among listed actions fills them (`orsd_gym.wrappers.FillActionTemplates`).
    action_templates: Mapping[str, TemplateFiller] = MappingProxyType({})

    @classmethod
    def rubric_example(cls, task: str, info: Mapping[str, Any]) -> WorkedExample | None:
        """The worked example shown before a rubric request for ``task`` (``info``: the
        attempts' reset info, empty without attempts): the first of `rubric_examples` of
        another kind of task; none when the env has none."""
        kind = info.get("task_type")
        return next((example for example in cls.rubric_examples if example.task_type != kind), None)

    @classmethod
    def expert_criteria(cls, actions: list[str], max_criteria: int) -> list[Criterion]:
        """The expert plan ``actions`` as candidate process criteria (`expert_bundle` keeps the
        most telling ``max_criteria``)."""
        return generic_criteria(actions, max_criteria)

    @classmethod
    def state_key(cls, observation: str, info: Mapping[str, Any]) -> str:
        """What says which state ``observation`` (with the ``info`` that came with it) shows, so
        that turns of different attempts at one task can be compared: turns whose keys are equal
        acted in the same state (GiGPO's anchor states, `orsd_gym.algos.gigpo`). By default the
        observation text exactly as the env gave it; an env whose observation leaves out part of
        the state, or holds what is not state (a step counter, a timestamp), says what to key on."""
        return observation


#: `DefaultPresentation.state_key`: (observation, its info) -> the state's key.
StateKey = Callable[[str, Mapping[str, Any]], str]


def prompt_for(env_id: str | None) -> EnvPrompt:
    return _PROMPT_OVERRIDES.get(env_id or "") or presenter(env_id).prompt


def templates_for(env_id: str | None) -> Mapping[str, TemplateFiller]:
    return presenter(env_id).action_templates


def examples_for(env_id: str | None) -> tuple[WorkedExample, ...]:
    return tuple(presenter(env_id).rubric_examples)


def example_for(env_id: str | None, task: str, info: Mapping[str, Any]) -> WorkedExample | None:
    return presenter(env_id).rubric_example(task, info)


def expert_criteria_for(env_id: str | None, actions: list[str], max_criteria: int) -> list[Criterion]:
    return presenter(env_id).expert_criteria(actions, max_criteria)


def state_key_for(env_id: str | None) -> StateKey:
    return presenter(env_id).state_key
