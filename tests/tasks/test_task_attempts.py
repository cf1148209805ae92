"""Profiling through the real agent loop and environment, with a scripted engine in place of a model."""

import dataclasses
import json

from tracerl.cli import main
from tracerl.envs import get_env
from tracerl.envs.math_tool import MathToolEnv
from tracerl.rollout import LoopBudgets
from tracerl.rollout.engine import Sample
from tracerl.tasks import profile
from tracerl.rollout.attempts import engine_attempt_fn


class ScriptedEngine:
    """Always answers 42, except for prompts containing CRASH, where it calls the Python tool."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    def generate(self, prompts, **kwargs):
        out = []
        for p in prompts:
            text = "<code>print(1)</code>" if "CRASH" in self.tokenizer.decode(p) else "<answer>42</answer>"
            ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
            out.append(Sample(ids, [-0.5] * len(ids), "stop"))
        return out


class BrokenSandbox:
    def run(self, code, **kwargs):
        raise OSError("sandbox worker died")


def test_engine_attempt_fn_counts_successes_per_task_and_skips_infra_failures(tiny, make_task):
    _, tok = tiny
    spec = dataclasses.replace(get_env("math_tool"), make=lambda: MathToolEnv(sandbox=BrokenSandbox()))
    tasks = [make_task("right", "Ann has 42 apples. How many apples does Ann have?", answer="42"),
             make_task("wrong", "Bo has 7 pens. How many pens does Bo have?", answer="7"),
             make_task("crash", "CRASH Cy has 5 cards. How many cards?", answer="5")]
    seen = []
    attempt = engine_attempt_fn(ScriptedEngine(tok), spec, budgets=LoopBudgets(2, 256, 16),
                                sampling={"temperature": 1.0, "top_p": 1.0, "top_k": 0}, seed=0,
                                on_trajectories=lambda trajs: seen.append([t.task_id for t in trajs]))
    prof = profile(tasks, attempt, n=3, batch_size=2)
    assert seen == [["right"] * 3 + ["wrong"] * 3, ["crash"] * 3]
    got = {tid: (e.successes, e.attempts) for tid, e in prof.entries.items()}
    # 42 is right for "right" (3/3), wrong for "wrong" (0/3); "crash" ends in infra_failure: no attempts count
    assert got == {"right": (3, 3), "wrong": (0, 3), "crash": (0, 0)}
    assert prof.pass_rate("crash") is None


def test_tasks_profile_command_writes_a_profile(tiny_dir, tmp_path, capsys):
    tasks = get_env("math_tool").generate("train", 3, 5)
    path = tmp_path / "math.jsonl"
    path.write_text("".join(json.dumps(t.to_dict()) + "\n" for t in tasks))
    out = tmp_path / "p.json"
    code = main(["tasks", "profile", str(path), "--model", str(tiny_dir), "--n", "2", "--out", str(out)])
    assert code == 0
    data = json.loads(out.read_text())
    assert sorted(data["tasks"]) == sorted(t.id for t in tasks)
    assert all(v["attempts"] == 2 for v in data["tasks"].values())
    assert data["policy"] == str(tiny_dir) and data["meta"]["env"] == "math_tool"
    assert "profiled 3 tasks × 2 attempts" in capsys.readouterr().out
