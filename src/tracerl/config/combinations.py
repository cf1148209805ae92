"""Settings of different recipe sections that do not combine, refused when the recipe loads.

`combination_problem(recipe)` is the one place such a refusal lives, so they can be counted and retired
as the loop learns to run them: each `return` below is one refusal, one sentence naming both settings
and a way out. Field-level checks (ranges, unknown names, consistency inside one section) stay in the
section's own file; the `Recipe` validator calls this once, after them.
"""

from __future__ import annotations

from tracerl.config.envs import MixtureConfig
from tracerl.config.ray import RayConfig
from tracerl.config.tasks import TasksConfig


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def combination_problem(recipe) -> str | None:
    """The first pair of settings the recipe combines that the run does not support, as one sentence; None
    when everything combines."""
    # -- gateway.agent: an external agent plays one environment through the trainer's own engine
    if recipe.gateway.agent and recipe.envs:
        return "gateway.agent plays one environment (env.name); remove envs: or gateway.agent"
    if recipe.rl.mode == "async" and recipe.gateway.agent:
        return ("gateway.agent samples from the trainer's own engine while its episode runs, which an "
                "async learner would update under it; use rl.mode: sync with gateway.agent")

    # -- envs: and mixture: (a run over several environments)
    if not recipe.envs:
        if recipe.mixture != MixtureConfig():  # by value: a resolved config round-trips
            return "mixture: options apply only to a run over several environments; add envs: or remove mixture:"
    else:
        if recipe.env.name != type(recipe.env)().name:  # by value, so a resolved config round-trips
            return ("the recipe sets both env.name and envs:; with envs: the env section holds only shared budgets, "
                    "so drop env.name")
        if recipe.tasks != TasksConfig():
            return ("with envs: each environment's tasks go under envs[i].tasks; move the recipe-level tasks: "
                    "section there")
        for k, st in enumerate(recipe.rl.stages):
            if st.tasks is not None:
                return (f"rl.stages.{k}.tasks: with envs: a stage picks environments (rl.stages.{k}.envs), each keeps "
                        "its own tasks")
        algo, mixture = recipe.rl.algorithm, recipe.mixture
        if mixture.loss_share == "episodes" and (algo.aggregation == "sequence" or algo.name == "mopd"):
            why = ("aggregation sequence already weighs every episode the same" if algo.aggregation == "sequence"
                   else "mopd's band loss counts kept tokens, not loss weights")
            return f"mixture.loss_share: episodes has no effect here ({why}); remove it"
        if mixture.schedule == "alternate":
            if mixture.loss_share == "episodes":
                return ("mixture.loss_share: episodes has no effect with mixture.schedule: alternate (each batch holds "
                        "one environment); remove one of them")
            samplers = [recipe.tasks.sampler] + [e.tasks.sampler for e in recipe.envs if e.tasks is not None]
            if algo.dynamic_sampling or any(s.kind == "dynamic" for s in samplers):
                return ("mixture.schedule: alternate draws one environment per batch and does not combine with dynamic "
                        "sampling (tasks.sampler.kind: dynamic, dapo), whose refills would draw another; use "
                        "schedule: mixed")
        if mixture.regression_tolerance is not None and not recipe.rl.eval_every:
            return "mixture.regression_tolerance watches the held-out evaluations during RL; set rl.eval_every > 0"

    # -- learner.ranks: every algorithm, role, LoRA and rl.mode async run sharded; the ranks run gloo on CPU
    ranks, device = recipe.learner.ranks, recipe.model.device
    if ranks > 1 and (device.startswith("cuda") or (device == "auto" and _cuda_available())):
        return (f"learner.ranks: {ranks} does not run with model.device {device!r}: the ranks run on CPU (gloo) for "
                "now; set model.device=cpu or learner.ranks: 1")

    # -- run.backend and ray:
    ray = recipe.ray
    if recipe.run.backend == "local":
        if ray != RayConfig():
            return "the ray: section applies only with run.backend: ray; set run.backend=ray or drop ray:"
    else:
        if recipe.gateway.agent:
            return ("gateway.agent's episodes are driven by an external agent through the trainer's own gateway, so no "
                    "Ray actor would play them; use run.backend: local with gateway.agent")
        workers = recipe.rl.rollout_workers if recipe.rl.mode == "async" else 1
        if ray.address is None and workers * ray.num_cpus_per_worker > ray.num_cpus:
            return (f"{workers} rollout actor(s) × ray.num_cpus_per_worker {ray.num_cpus_per_worker:g} need more than "
                    f"the local runtime's ray.num_cpus {ray.num_cpus}, so an actor would wait forever; raise "
                    "ray.num_cpus or lower rl.rollout_workers / ray.num_cpus_per_worker")
        if ray.address is None and ray.num_gpus_per_worker > 0 and not _cuda_available():
            return (f"ray.num_gpus_per_worker {ray.num_gpus_per_worker:g} asks for a GPU, and the local Ray runtime "
                    "sees none; set ray.num_gpus_per_worker=0 or connect to a GPU cluster with ray.address")

    # -- model.lora: the KL reference is the policy with its adapter disabled
    m = recipe.model
    if m.lora is not None:
        if any(s.reset_reference for s in recipe.rl.stages):
            return ("with model.lora the KL reference is the base model (the adapter disabled), so an RL stage cannot "
                    "reset it to the current policy; drop reset_reference or set model.lora=null")
        if m.reference_device not in (None, m.device):
            return ("with model.lora the reference is the policy itself with its adapter disabled, so "
                    "model.reference_device cannot differ from model.device; leave it null")

    # -- engine.name: hf and vllm load the policy as a plain model at each sync (LoRA merged in) and sample under
    # its autocast, so they combine with rl.mode, run.backend, model.lora, model.autocast and learner.ranks
    if recipe.engine.name == "vllm" and recipe.gateway.agent:
        return ("engine.name vllm does not run gateway.agent (the gateway serves the engine's calls in the trainer's "
                "process, and vLLM's offline LLM is no server of per-call spans); use engine.name torch or hf")
    return None
