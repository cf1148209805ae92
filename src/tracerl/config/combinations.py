"""Settings of different recipe sections that do not combine, refused when the recipe loads.

`combination_problem(recipe)` is the one place such a refusal lives, so they can be counted and retired
as the loop learns to run them: each `return` below is one refusal, one sentence naming both settings
and a way out. Every mode runs through one RL loop, so sync/async, `envs:`, LoRA, learner ranks, Ray,
the engines, corrections and loss terms combine (tests/integration/test_combinations.py); what stays
here is meaningless or not written yet. Field-level checks (ranges, unknown names, a section's keys
that have no effect: `check_envs` / `check_mixture` in config/envs.py, `check_ray` in config/ray.py)
stay in the section's own file; the `Recipe` validator calls this once, after them.
"""

from __future__ import annotations


def combination_problem(recipe) -> str | None:
    """The first pair of settings the recipe combines that the run does not support, as one sentence; None
    when everything combines. Four remain: each is meaningless or not written yet, and says why."""
    gateway, m = recipe.gateway.agent, recipe.model
    # 1. gateway.agent: an external agent drives its episodes over HTTP through the trainer's gateway, which
    #    fronts the trainer's own engine or rollout.workers engine processes fed by queue (serve/engine_pool.py)
    ro = recipe.rollout
    clash = ("envs:" if recipe.envs else "rl.mode: async" if recipe.rl.mode == "async" else
             "run.backend: ray" if recipe.run.backend == "ray" else
             "engine.name: vllm" if recipe.engine.name == "vllm" else
             "rollout.weight_sync: broadcast" if ro.weight_sync == "broadcast" else
             "rollout.sync_bucket_mb" if "sync_bucket_mb" in ro.model_fields_set else None) if gateway else None
    if clash:
        return (f"gateway.agent does not combine with {clash}: its external agent drives one environment's episodes "
                "over HTTP through the trainer's gateway (a torch or hf engine in this process, or rollout.workers "
                f"engine processes sent whole state_dicts by queue, sampled between updates), so drop {clash} or "
                "gateway.agent")
    # 2. model.lora: the KL reference is the policy itself with its adapter disabled
    if m.lora is not None and (any(s.reset_reference for s in recipe.rl.stages)
                               or m.reference_device not in (None, m.device)):
        what = ("an RL stage's reset_reference" if any(s.reset_reference for s in recipe.rl.stages)
                else "model.reference_device")
        return (f"with model.lora the KL reference is the policy itself with its adapter disabled, so {what} cannot "
                "apply; drop it or set model.lora=null")
    return _learner_problem(recipe)


def _learner_problem(recipe) -> str | None:
    """Refusals of `learner.packing` / `learner.max_tokens_per_micro_batch` (train/packing.py)."""
    lc = recipe.learner
    # 3. packing and the shared-prefix split lay out the same rows two different ways
    if lc.packing and lc.share_prefix:
        return ("learner.packing does not combine with learner.share_prefix: true (the shared-prefix split runs the "
                "rows padded on one common cache, packing runs them end to end without one); set "
                "learner.share_prefix=false or learner.packing=false")
    micro = lc.max_tokens_per_micro_batch is not None
    # 4. accumulating micro-batch gradients is exact only for a loss that is a sum over rows
    if micro:
        if not recipe.rl.algorithm.row_separable():
            return (f"learner.max_tokens_per_micro_batch needs a loss that is a sum over rows, and rl.algorithm "
                    f"{recipe.rl.algorithm.name!r} with its settings normalises over the whole minibatch (MIS, NLL, "
                    "Clip-Cov, KL-Cov or MOPD); drop the budget or those settings")
    return None
