"""One SFT pass of a recipe, whatever its examples' source (`sft.source`, or an `rft` stage).

expert: the env's scripted expert played through the env (train/demos.py);
data: a conversations file (train/sft_data.py); rejection: the current policy's own samples that
the verifier accepts (run/rejection.py). All three train with the same ACTION-only loss.
"""

from __future__ import annotations

from tracerl.config import Recipe
from tracerl.rollout import LoopBudgets
from tracerl.train.demos import tokenize_demo
from tracerl.run.rejection import RULE, rejection_sample
from tracerl.train.sft import train_sft
from tracerl.train.sft_data import load_conversations, native_tools_of


def load_sft_data(recipe: Recipe):
    """The conversations file's demonstrations when the recipe trains on one (validated before any run dir exists)."""
    wants = recipe.sft.source == "data" and "sft" in recipe.stages
    return load_conversations(recipe.sft.data, native=native_tools_of(recipe)) if wants else None


def run_sft_stage(source: str, *, stage: str, recipe: Recipe, model, tokenizer, engine, spec, demos, train_tasks,
                  run, hashes: dict[str, str], policy_version: int, step: int, loggers, say) -> dict[str, float]:
    """Train `model` in place on `source`'s examples; returns the pass's summary (counts for rejection)."""
    cfg, counts = recipe.sft, {}
    if source == "rejection":
        rej = recipe.sft.rejection
        tasks = train_tasks[:rej.max_tasks]
        examples, counts, trajs = rejection_sample(
            engine, spec, tasks, samples=rej.samples, budgets=LoopBudgets.from_env(recipe.env),
            sampling=recipe.sampling.model_dump(), seed=recipe.run.seed * 7919 + 17 + step,
            policy_version=policy_version, tokenizer_hashes=hashes)
        run.store.add_trajectories(trajs, stage=stage, step=step)
        run.store.add_event(stage, f"rejection sampling kept {int(counts['rft/kept'])} of {int(counts['rft/total'])}",
                            stage=stage, step=step, payload={"rule": RULE, **counts})
        loggers.log(counts, stage=stage, step=step)
        say(f"{stage}: rejection sampling kept {int(counts['rft/kept'])} of {int(counts['rft/total'])} completions "
            f"({int(counts['rft/tasks_kept'])} of {len(tasks)} tasks, {int(counts['rft/distinct_kept'])} distinct); "
            f"rule: {RULE}")
        cfg = cfg.model_copy(update={"epochs": rej.epochs, "lr": rej.lr or cfg.lr})
        if not examples:
            say(f"{stage}: nothing kept, so nothing trained")
            return counts
    else:
        examples = [tokenize_demo(tokenizer, d) for d in demos]
        say(f"{stage}: {len(examples)} {'conversations from ' + str(cfg.data) if source == 'data' else 'demonstrations'}, "
            f"{cfg.epochs} epochs")
    summary = train_sft(model, tokenizer, examples, cfg, seed=recipe.run.seed, progress=recipe.run.progress,
                        share_prefix=recipe.learner.share_prefix, optimizer=recipe.learner.optimizer,
                        log=lambda m, s: loggers.log(m, stage=stage, step=s))
    say(f"{stage}: final loss {summary['sft/final_loss']:.3f} in {summary['sft/wall_s']:.1f}s")
    return {**counts, **summary}
