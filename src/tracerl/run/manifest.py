"""The manifest of a fresh run (`manifest.json`): what was trained on, by what, from which code.

One route: `tasks` holds its pool (hashes, counts, revisions, the pool's own manifest, the sampler),
`env` and `verifier` its name and revision. Several (`envs:`): `tasks.envs`, `env.envs` and
`verifier` hold one entry per environment (share, pool hashes and counts, SFT demonstrations,
reward weights), and the names are joined with `+`. Both list the resolved RL stages.
"""

from __future__ import annotations

from tracerl.contract.task import tasks_sha256
from tracerl.envs._verify import declared_verifier
from tracerl.manifest import build_manifest
from tracerl.rollout import ray_backend
from tracerl.run.multienv import stage_envs
from tracerl.run.common import _sandbox_revision
from tracerl.run.envs import RunEnvs
from tracerl.run.stages import rl_stages


def _pool(envs: RunEnvs, name: str) -> dict:
    train, heldout = envs.pools[name].train, envs.heldout[name]
    return {"train_sha256": tasks_sha256(train), "heldout_sha256": tasks_sha256(heldout), "train": len(train),
            "heldout": len(heldout)}


def run_manifest(recipe, envs: RunEnvs, *, config_yaml: str, hashes: dict[str, str], grader,
                 sft_counts: dict[str, int]) -> dict:
    stages = [st.describe() for st in rl_stages(recipe)]
    verifier = {r.name: dict(zip(("name", "revision"), declared_verifier(r.spec))) for r in envs.routes}
    if envs.mixed:
        info = {r.name: {"share": r.share, **_pool(envs, r.name), "sft_demos": sft_counts.get(r.name, 0),
                         "reward_weights": r.spec.reward_weights} for r in envs.routes}
        tasks = {"source": envs.name, "envs": info,
                 "rl_stages": [{**st, "envs": names} for st, names in zip(stages, stage_envs(recipe))]}
        env = {"name": envs.name, "envs": {r.name: r.spec.revision for r in envs.routes}}
    else:
        (r,) = envs.routes
        pool = envs.pools[r.name]
        tasks = {"source": r.name, **_pool(envs, r.name),
                 "revisions": sorted({t.source_revision for t in pool.train + envs.heldout[r.name]}),
                 "pool": pool.manifest(), "sampler": recipe.tasks.sampler.model_dump(mode="json"), "rl_stages": stages}
        env, verifier = {"name": r.name, "revision": r.spec.revision}, verifier[r.name]
    if getattr(grader, "manifest_key", None) == "reward_model":  # roles.reward_model (train/reward_model_role.py)
        verifier["reward_model"] = {**grader.grader.manifest(), "weight": grader.cfg.weight}
    elif grader is not None:
        verifier["grader"] = {**grader.grader.manifest(), "mode": grader.cfg.mode, "path": grader.cfg.path}
    return build_manifest(
        config_yaml=config_yaml, seeds={"run": recipe.run.seed}, tokenizer=hashes, tasks=tasks, env=env,
        verifier=verifier, sandbox=_sandbox_revision(), truncation_policy=recipe.rl.truncation,
        model={"path": recipe.model.path, "gguf_file": recipe.model.gguf_file, "tiny": recipe.model.path is None},
        backend=ray_backend.backend_manifest(recipe))
