"""Rollout speed with shared prompt prefixes vs without: a GRPO group's G attempts at one task.

The G episodes start from the same rendered prompt (a system prompt and an ALFWorld-like first
observation with a numbered list of admissible actions, about ``--prompt-tokens`` long) and
play ``--turns`` turns of up to ``--new-tokens`` tokens (the demo's shape: 6 turns of 10), each
keeping its generation session. With shared prefixes the prompt is encoded once and every row
starts from a copy of its keys and values; without, each row encodes it. Same seeds, tokens
checked identical; the ratio is wall time(without) / wall time(with), best of ``--repeats``
alternating runs each.

    .venv/bin/python benchmarks/perf/shared_prefix.py [--group 8] [--prompt-tokens 500] [--json out.json]
"""

from __future__ import annotations

import _side_by_side as side_by_side
from rollout_kv_cache import play

SYSTEM = "You are a household agent. Answer with the number of one admissible action."
ROOM = "You are in the middle of a room. Looking quickly around you, you see "
TASK = "Your task is to: put a clean soapbar in countertop."


def group_prompt(policy, prompt_tokens: int) -> list[dict[str, str]]:
    """A prompt of about ``prompt_tokens`` tokens: a room description and numbered actions."""
    things = [f"a {kind} {n}" for n in range(1, 40) for kind in ("cabinet", "drawer", "countertop", "shelf")]
    actions = [f"go to {thing[2:]}" for thing in things] + [f"open {thing[2:]}" for thing in things]
    for count in range(4, len(actions)):
        listed = "\n".join(f"{k + 1}. {a}" for k, a in enumerate(actions[:count]))
        user = f"{ROOM}{', '.join(things[: count // 2])}.\n{TASK}\nAdmissible actions:\n{listed}"
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]
        if len(policy.chat.prompt_tokens(messages)) >= prompt_tokens:
            return messages
    return messages


def main() -> None:
    parser = side_by_side.parser(__doc__.splitlines()[0], repeats=3)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--prompt-tokens", type=int, default=500)
    parser.add_argument("--turns", type=int, default=6)
    parser.add_argument("--new-tokens", type=int, default=10)
    args = parser.parse_args()
    policy = side_by_side.load(args)
    messages = group_prompt(policy, args.prompt_tokens)
    prompts = [messages] * args.group
    play(policy, prompts[:1], 1, 2, True)  # warm-up

    def run(mode: str):
        policy.share_prefixes = mode == "shared"
        return play(policy, prompts, args.turns, args.new_tokens, reuse=True)

    runs = side_by_side.alternate(["shared", "separate"], run, args.repeats)
    best = {mode: min(r[0] for r in results) for mode, results in runs.items()}
    same = all(r[1] == runs["shared"][0][1] for results in runs.values() for r in results)
    prompt_length = len(policy.chat.prompt_tokens(messages))
    ratio = best["separate"] / best["shared"]
    print(
        f"model={args.model} group={args.group} prompt={prompt_length} tokens turns={args.turns} "
        f"new_tokens/turn<={args.new_tokens}, best of {args.repeats}"
    )
    for mode, results in runs.items():
        print(f"{mode:>8} prompt encodings: {best[mode]:7.2f} s  ({results[0][2]} context tokens encoded)")
    print(f"speed-up ratio: {ratio:.2f}x   identical tokens: {same}")
    side_by_side.write_record(
        args,
        {
            "prompt_tokens": prompt_length,
            "seconds": {mode: [r[0] for r in results] for mode, results in runs.items()},
            "encoded_tokens": {mode: results[0][2] for mode, results in runs.items()},
            "ratio": ratio,
            "identical_tokens": same,
        },
    )


if __name__ == "__main__":
    main()
