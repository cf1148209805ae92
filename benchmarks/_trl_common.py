"""What the two TRL comparisons (vs_trl.py, vs_trl_real.py) share: trajectories as the dict a TRL
`rollout_func` returns, the reward function that reads it back, and a per-step wall-clock callback."""

from __future__ import annotations

import time


def trl_rollout_batch(trajs) -> dict:
    """tracerl trajectories as TRL's rollout_func output: prompt/completion ids, the engine's log-probs on
    action tokens (0 elsewhere), the action mask as `env_mask`, and the verified reward."""
    from tracerl.contract import TokenRole

    out = {"prompt_ids": [], "completion_ids": [], "logprobs": [], "env_mask": [], "env_reward": []}
    for t in trajs:
        n = t.spans[0].end  # the prompt span
        out["prompt_ids"].append(list(t.token_ids[:n]))
        out["completion_ids"].append(list(t.token_ids[n:]))
        out["logprobs"].append([lp if r == TokenRole.ACTION else 0.0 for lp, r in zip(t.behavior_logprobs[n:], t.roles[n:])])
        out["env_mask"].append([int(r == TokenRole.ACTION) for r in t.roles[n:]])
        out["env_reward"].append(float(t.reward))
    return out


def env_reward(prompts, completions, env_reward, **kw):
    """TRL reward function: the environment's verified reward passed through the rollout batch."""
    return list(env_reward)


def step_timer():
    """A TrainerCallback recording each optimizer step's wall time in `.step_s`."""
    from transformers import TrainerCallback

    class StepTimer(TrainerCallback):
        def __init__(self):
            self.step_s, self.t0 = [], None

        def on_step_begin(self, args, state, control, **kw):
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            self.step_s.append(time.perf_counter() - self.t0)

    return StepTimer()
