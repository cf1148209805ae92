"""How strong are code_tests' hidden tests, and is an outcome stable?

* `mutants(reference)`: first-order mutants of the reference solution (one AST edit each:
  arithmetic operator, comparison, integer constant ± 1, swapped conditional branches,
  max/min/sum/len swaps). `mutation_score(task)` runs every mutant on the hidden tests in the
  sandbox: a mutant is *killed* when it fails at least one test. A surviving mutant is either a
  gap in the tests or equivalent to the reference (not decided here: survivors are listed).
  Sandbox crashes are infrastructure, counted apart and out of the score.
* `repeat_outcome(code, cases, runs)`: AceReason-style repeated execution. The candidate is run
  `runs` times; runs that crashed the sandbox are infrastructure errors; the rest must agree
  (same status and passed count) for a stable `pass` / `fail`, else the outcome is `flaky`.

    .venv/bin/python -m tracerl.envs.code_tests.mutation [N]   # mean score over N held-out tasks
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import sys
from concurrent.futures import ThreadPoolExecutor

from tracerl.envs.code_tests.harness import Outcome, evaluate

_BINOPS = {ast.Add: [ast.Sub], ast.Sub: [ast.Add], ast.Mult: [ast.Add], ast.FloorDiv: [ast.Mult],
           ast.Mod: [ast.FloorDiv], ast.Pow: [ast.Mult]}
_CMPOPS = {ast.Gt: [ast.GtE], ast.GtE: [ast.Gt], ast.Lt: [ast.LtE], ast.LtE: [ast.Lt], ast.Eq: [ast.NotEq],
           ast.NotEq: [ast.Eq]}
_CALLS = {"max": ["min"], "min": ["max"], "sum": ["len"], "len": ["sum"]}


def _edits(node: ast.AST) -> list:
    """The single edits possible at `node`, each a function that applies it in place."""
    out = []
    if isinstance(node, ast.BinOp):
        out += [lambda n, op=op: setattr(n, "op", op()) for op in _BINOPS.get(type(node.op), [])]
    elif isinstance(node, ast.Compare) and len(node.ops) == 1:
        out += [lambda n, op=op: setattr(n, "ops", [op()]) for op in _CMPOPS.get(type(node.ops[0]), [])]
    elif isinstance(node, ast.Constant) and type(node.value) is int:
        out += [lambda n, d=d: setattr(n, "value", n.value + d) for d in (1, -1)]
    elif isinstance(node, ast.IfExp):
        def swap(n):
            n.body, n.orelse = n.orelse, n.body
        out.append(swap)
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        out += [lambda n, name=name: setattr(n.func, "id", name) for name in _CALLS.get(node.func.id, [])]
    return out


def mutants(reference: str) -> list[str]:
    """Every distinct first-order mutant's source (the reference itself excluded), in AST order."""
    tree = ast.parse(reference)
    sites = [(i, k) for i, node in enumerate(ast.walk(tree)) for k in range(len(_edits(node)))]
    seen, out = {ast.unparse(tree)}, []
    for i, k in sites:
        mutant = copy.deepcopy(tree)
        node = list(ast.walk(mutant))[i]
        _edits(node)[k](node)
        src = ast.unparse(mutant)
        if src not in seen:
            seen.add(src)
            out.append(src)
    return out


@dataclasses.dataclass
class MutationReport:
    killed: int
    total: int  # mutants that ran (sandbox crashes excluded)
    survivors: list[str]
    infra: int

    @property
    def score(self) -> float:
        return self.killed / self.total if self.total else float("nan")


def mutation_score(reference: str, cases: list, sandbox=None, workers: int = 8) -> MutationReport:
    """Run each mutant of `reference` on `cases` ((input, expected) pairs) and count the killed ones."""
    ms = mutants(reference)
    with ThreadPoolExecutor(workers) as pool:
        outcomes = list(pool.map(lambda m: evaluate(m, cases, sandbox), ms))
    ran = [(m, o) for m, o in zip(ms, outcomes) if not o.infra_failure]
    survivors = [m for m, o in ran if o.passed == o.total]
    return MutationReport(len(ran) - len(survivors), len(ran), survivors, len(ms) - len(ran))


def task_mutation_score(task, sandbox=None) -> MutationReport:
    """A code_tests task's hidden tests against its reference solution's mutants."""
    return mutation_score(task.answer, [tuple(c) for c in task.tests["hidden"]], sandbox)


@dataclasses.dataclass
class RepeatedOutcome:
    verdict: str  # "pass" | "fail" (every non-infra run agreed) | "flaky" | "infra" (every run crashed)
    runs: int
    infra_runs: int
    passed: list[int]  # tests passed in each non-infra run


def repeat_outcome(code: str, cases: list, runs: int = 5, sandbox=None) -> RepeatedOutcome:
    outcomes: list[Outcome] = [evaluate(code, cases, sandbox) for _ in range(runs)]
    real = [o for o in outcomes if not o.infra_failure]
    if not real:
        return RepeatedOutcome("infra", runs, runs, [])
    keys = {(o.status, o.passed) for o in real}
    verdict = "flaky" if len(keys) > 1 else ("pass" if real[0].passed == real[0].total else "fail")
    return RepeatedOutcome(verdict, runs, runs - len(real), [o.passed for o in real])


def main(argv: list[str]) -> int:
    from tracerl.envs import get_env

    n = int(argv[0]) if argv else 30
    tasks = get_env("code_tests").generate("heldout", n, 0)
    reports = [task_mutation_score(t) for t in tasks]
    killed, total = sum(r.killed for r in reports), sum(r.total for r in reports)
    weakest = sorted(zip(reports, tasks), key=lambda rt: rt[0].score)[:3]
    print(f"code_tests hidden tests over {n} held-out tasks: {killed} of {total} mutants killed "
          f"({killed / max(total, 1):.3f}); infra {sum(r.infra for r in reports)}; "
          f"tasks with a survivor {sum(bool(r.survivors) for r in reports)}")
    for r, t in weakest:
        if r.survivors:
            print(f"  {t.id}: {t.answer!r} score {r.score:.2f}, survivors {r.survivors[:3]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
