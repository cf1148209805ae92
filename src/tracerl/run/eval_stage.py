"""Held-out evaluation of a run: every environment's held-out tasks under the frozen protocol.

Each route plays its clean env (training-time `faults:` never reach it) on its first `eval_tasks`
held-out tasks under its own budgets, and its numbers are recorded under that protocol's hash
(eval/record.py), so different protocols never share a column. One route: the numbers are `eval/*`,
with `eval.slices` beside them (eval/slices.py). Several (`envs:`): each environment's are
`eval/<env>/*` (its slices `eval/<env>/slice/*`), and `eval/*` is their unweighted mean (a macro
average over domains). Every
evaluation is appended to `summary.json`.
"""

from __future__ import annotations

import json
from pathlib import Path

from tracerl.eval.heldout import run_heldout
from tracerl.eval.record import heldout_protocol, record_evaluation
from tracerl.eval.slices import report_slices
from tracerl.run.common import RunResult, _say
from tracerl.run.envs import RunEnvs

_MACRO = ("success", "tool_calls_per_episode", "truncation_rate", "infra_failure_rate")


class HeldoutEval:
    """`evaluate(step, policy_version, label)` runs and records one evaluation; `evals` holds them all."""

    def __init__(self, recipe, envs: RunEnvs, *, run, engine, model, hashes: dict[str, str], episodes,
                 summary_path: Path) -> None:
        self.recipe, self.envs, self.run, self.engine, self.model = recipe, envs, run, engine, model
        self.hashes, self.episodes, self.summary_path = hashes, episodes, summary_path
        self.sampling = {"temperature": recipe.eval.temperature, "top_p": recipe.eval.top_p, "top_k": 0}
        self.evals: list[dict] = json.loads(summary_path.read_text())["evals"] if summary_path.exists() else []

    def evaluate(self, step: int, policy_version: int, label: str) -> dict[str, float]:
        recipe, run, m, columns = self.recipe, self.run, {}, {}
        for r in self.envs.routes:
            tasks = self.envs.heldout[r.name][: r.eval_tasks]
            frozen = dict(samples=recipe.eval.samples, ks=recipe.eval.k, budgets=r.budgets, sampling=self.sampling,
                          policy_version=policy_version, seed=recipe.run.seed + 7919, tokenizer_hashes=self.hashes,
                          episodes=self.episodes)
            res = run_heldout(self.engine, r.clean, tasks, **frozen)
            protocol = heldout_protocol(model=self.model, tokenizer_hashes=self.hashes, spec=r.spec, tasks=tasks,
                                        sampling=self.sampling, budgets=r.budgets, n=recipe.eval.samples,
                                        ks=recipe.eval.k, seed=recipe.run.seed + 7919)
            record_evaluation(run.path, protocol, res.trajectories, run=run, step=step,
                              extra={"policy_version": float(policy_version)},
                              prefix=f"eval/{r.name}" if self.envs.mixed else "eval")
            columns[r.name] = protocol.column
            m |= res.metrics(prefix=f"eval/{r.name}") if self.envs.mixed else res.metrics()
            if recipe.eval.slices:  # beside the clean numbers, under the same protocol (eval/slices.py)
                m.update(report_slices(run, step, recipe, run_heldout, self.engine, r.clean, tasks, res.trajectories,
                                       frozen, say=_say, protocol=protocol.column,
                                       env=r.name if self.envs.mixed else None))
        if self.envs.mixed:
            for key in [*_MACRO, *(f"pass@{k}" for k in recipe.eval.k)]:
                vals = [m[f"eval/{r.name}/{key}"] for r in self.envs.routes if f"eval/{r.name}/{key}" in m]
                if vals:
                    m[f"eval/{key}"] = sum(vals) / len(vals)
        protocol = columns if self.envs.mixed else columns[self.envs.routes[0].name]
        self.evals.append({"after": label, "step": step, "protocol": protocol, **m})
        self.summary_path.write_text(json.dumps({"evals": self.evals}, indent=2))
        return m

    def say(self, m: dict[str, float], label: str) -> None:
        """The console line of an eval stage."""
        if self.envs.mixed:
            _say(f"eval after {label}: held-out success {m['eval/success']:.3f} (mean over environments): "
                 + ", ".join(f"{r.name} {m[f'eval/{r.name}/success']:.3f}" for r in self.envs.routes))
            return
        r = self.envs.routes[0]
        _say(f"eval after {label}: held-out success {m['eval/success']:.3f} "
             f"(avg@{self.recipe.eval.samples} over {len(self.envs.heldout[r.name][: r.eval_tasks])} tasks), "
             f"tool calls/episode {m['eval/tool_calls_per_episode']:.2f}")

    def best_success(self) -> dict[str, float]:
        """Each environment's best held-out success so far (what the domain regression gate compares to)."""
        best: dict[str, float] = {}
        for e in self.evals:
            for r in self.envs.routes:
                v = e.get(f"eval/{r.name}/success")
                if v is not None:
                    best[r.name] = max(best.get(r.name, v), v)
        return best

    def print_domains(self, result: RunResult) -> None:
        """With several environments: held-out success per environment after each eval stage."""
        if not self.envs.mixed or not result.evals:
            return
        names = [r.name for r in self.envs.routes]
        head = f"{'after':<8} " + " ".join(f"{n:>13}" for n in names)
        _say("\nheld-out success per environment\n" + head + "\n" + "-" * len(head))
        for e in result.evals:
            _say(f"{e['after']:<8} " + " ".join(f"{e.get(f'eval/{n}/success', float('nan')):>13.3f}" for n in names))
