"""One step numbering and protocol-beside-the-name in the places issue 42 left over: the RL stage's console
line, the synthetic run the report tests read, the slices' metrics and `tracerl eval --env X` on an `envs:` run."""

import importlib.util
import json
from pathlib import Path
from types import SimpleNamespace

from tracerl.commands.eval import metric_prefix
from tracerl.envs import get_env
from tracerl.eval.slices import report_slices
from tracerl.run.rl_stage import stage_steps
from tracerl.run.stages import RLStage
from tracerl.store import Store

_spec = importlib.util.spec_from_file_location("report_screenshot", Path(__file__).parents[2] / "benchmarks" / "report_screenshot.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


def test_rl_stage_line_numbers_updates_from_one():
    # a first stage of 2 updates covers global [0, 2) of updates done: rl step 1 and rl step 2
    assert stage_steps(RLStage(0, "warm", 0, 2, recipe=None, tasks=None)) == "steps 1..2"
    assert stage_steps(RLStage(1, "hard", 2, 5, recipe=None, tasks=None)) == "steps 3..5"


def test_synthetic_run_numbers_steps_and_names_evals_like_a_real_run(tmp_path):
    run = bench.synthetic_run(tmp_path, steps=4)
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if r["stage"] == "rl"] == [1, 2, 3, 4]
    [ev] = [r for r in rows if r["stage"] == "eval"]
    assert ev["step"] == 4 and ev["eval/avg@4"] > 0  # after rl step 4 (eval_every 4), no hash in the name
    assert not any(k.count("/") > 1 for k in ev if k.startswith("eval/"))
    column = json.loads((run / "summary.json").read_text())["evals"][0]["protocol"]
    assert ev["tags"] == {"eval/protocol": column}
    with Store(run / "store.sqlite") as store:
        assert len(list(store.trajectories(stage="rl", step=1))) == 16 and not list(store.trajectories(stage="rl", step=0))


class _Run:
    def __init__(self):
        self.logged = []

    def log_metrics(self, metrics, *, stage, step, tags=None):
        self.logged.append((dict(metrics), stage, step, tags))


def _slices(env):
    recipe = SimpleNamespace(eval=SimpleNamespace(slices=["tool_error"]), faults=None)
    heldout = lambda *a, **k: SimpleNamespace(metrics=lambda prefix: {f"{prefix}/success": 0.25})  # noqa: E731
    run, said = _Run(), []
    m = report_slices(run, 3, recipe, heldout, None, get_env("math_tool"), [], [], {}, say=said.append,
                      protocol="abcdef012345", env=env)
    return m, run.logged, said


def test_slices_are_logged_with_the_protocol_beside_them():
    m, [(logged, stage, step, tags)], said = _slices(None)
    assert stage == "eval" and step == 3 and logged == m and m["eval/slice/tool_error/success"] == 0.25
    assert tags == {"eval/protocol": "abcdef012345"}
    assert said[0].startswith("eval slices: tool_error: 0.250")
    m, [(logged, _, _, tags)], _ = _slices("arith")  # one env of an envs: run: its own prefix and tag
    assert "eval/arith/slice/tool_error/success" in logged and tags == {"eval/arith/protocol": "abcdef012345"}


def test_tracerl_eval_env_on_an_envs_run_logs_under_the_env():
    assert metric_prefix(SimpleNamespace(envs=None), "math_tool") == "eval"
    assert metric_prefix(SimpleNamespace(envs=[{"name": "arith"}]), "arith") == "eval/arith"
