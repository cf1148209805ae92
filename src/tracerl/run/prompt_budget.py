"""Preflight: every task's first prompt fits its episode's token budget.

A prompt that fills `max_tokens` leaves no room to act: every episode ends MAX_TOKENS before its first
token, the run trains on nothing and evaluates to 0.000 without a word. Before any stage runs, the
longest prompt of each environment's training and held-out tasks is rendered exactly as the agent loop
renders it (the env's reset messages through the chat template) and compared with the budget.
"""

from __future__ import annotations

from tracerl.errors import UserError
from tracerl.rollout.render import render_prompt


def _longest(tasks: list, tokenizer):
    """The task whose prompt text is longest in tokens (its rendered prompt adds what the env puts around it)."""
    if not tasks:
        return None
    lengths = [len(ids) for ids in tokenizer([str(t.prompt) for t in tasks], add_special_tokens=False)["input_ids"]]
    return tasks[max(range(len(tasks)), key=lengths.__getitem__)]


def rendered_length(spec, task, tokenizer, seed: int = 0) -> int:
    """Tokens of `task`'s first prompt as the agent loop renders it (`rollout/agent_loop.py`)."""
    env = spec.make()
    try:
        ids, _ = render_prompt(tokenizer, env.reset(task, seed))
    finally:
        close = getattr(env, "close", None)
        if callable(close):
            close()
    return len(ids)


def check_prompt_budget(envs, tokenizer) -> None:
    """A `UserError` naming the task, its prompt length and the key to raise when the longest training or
    held-out prompt of any environment of `envs` (a `run.envs.RunEnvs`) leaves no token to generate."""
    for r in envs.routes:
        budget = r.env.max_tokens
        key = f"max_tokens of the envs: entry {r.name!r}" if envs.mixed else "env.max_tokens"
        spec = r.clean or r.spec  # the env as it is, without fault injection
        for split, tasks in (("training", envs.pools[r.name].train), ("held-out", envs.heldout[r.name])):
            task = _longest(list(tasks), tokenizer)
            if task is None:
                continue
            n = rendered_length(spec, task, tokenizer)
            if n >= budget:
                raise UserError(f"the prompt of {split} task {task.id!r} ({r.name}) is {n} tokens, which leaves no "
                                f"room in the episode budget of {budget} tokens; raise {key} above {n} (by at "
                                f"least {r.env.max_new_tokens} for one full turn) or shorten the prompt")
