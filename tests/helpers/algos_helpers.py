"""Real tiny trajectories for algorithm tests: tokens sampled by the real `tiny-random` policy.

Each attempt is a two-turn episode assembled exactly as a collector lays it out: the rendered
prompt (mask 0), a sampled model turn (mask 1, sampling log-probs), the env's observation in
the chat template's bridge (mask 0), and a second sampled turn conditioned on everything
before it. Outcomes (``success``) are assigned by the test, since a random model never wins.
"""

from __future__ import annotations

from collections.abc import Sequence

from orsd_gym.policies.base import Policy, SamplingParams
from orsd_gym.rollout.trajectory import Trajectory, TurnSpan

TASKS = ("Find the hidden number between 1 and 20.", "Put a clean apple in the fridge.")


def make_group(
    policy: Policy,
    *,
    group_id: int,
    task_id: int,
    successes: Sequence[bool],
    seed: int,
    max_new_tokens: int = 6,
    temperature: float = 1.0,
) -> list[Trajectory]:
    task = TASKS[task_id % len(TASKS)]
    messages = [
        {"role": "system", "content": "You are an agent. Reply with one action."},
        {"role": "user", "content": f"Your task is to: {task}"},
    ]
    prompt = policy.chat.prompt_tokens(messages)
    n = len(successes)
    params = SamplingParams(max_new_tokens=max_new_tokens, temperature=temperature, seed=seed)
    first = policy.generate([prompt] * n, params)
    observation = "Nothing happens."
    bridge = policy.tokenizer.encode(
        f"<|im_end|>\n<|im_start|>user\n{observation}<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False
    )
    contexts = [prompt + c.token_ids + bridge for c in first]
    second = policy.generate(
        contexts, SamplingParams(max_new_tokens=max_new_tokens, temperature=temperature, seed=seed + 1)
    )
    out = []
    for k, (a, b, success) in enumerate(zip(first, second, successes)):
        tokens = prompt + a.token_ids + bridge + b.token_ids
        p, m1, e = len(prompt), len(prompt) + len(a.token_ids), len(prompt) + len(a.token_ids) + len(bridge)
        out.append(
            Trajectory(
                token_ids=tokens,
                loss_mask=[0] * p + [1] * len(a.token_ids) + [0] * len(bridge) + [1] * len(b.token_ids),
                logprobs=[0.0] * p + list(a.logprobs) + [0.0] * len(bridge) + list(b.logprobs),
                temperature=temperature,
                spans=[
                    TurnSpan("prompt", 0, p),
                    TurnSpan("model", p, m1),
                    TurnSpan("env", m1, e),
                    TurnSpan("model", e, len(tokens)),
                ],
                rewards=[0.0, float(success)],
                infos=[{"task": task}, {"is_valid_action": False}, {"is_valid_action": True, "won": success}],
                model_turns=[a.text, b.text],
                actions=[a.text, b.text],
                observations=[f"Your task is to: {task}", observation, "Done." if success else observation],
                task=task,
                prompt_messages=messages,
                env_id="orsd_gym/Test-v0",
                task_id=task_id,
                seed=seed,
                group_id=group_id,
                episode_id=group_id * 1000 + k,
                success=bool(success),
                terminated=bool(success),
                format_valid=[True, True],
            )
        )
    return out
