"""Rejection-sampled SFT: the kept/total counts on a scripted policy, and an `rft` stage from the CLI."""

import json

from tracerl.cli import main
from tracerl.contract import TerminalReason
from tracerl.contract.roles import TokenRole
from tracerl.contract.task import Task
from tracerl.envs import EnvSpec, Step, get_env
from tracerl.rollout import LoopBudgets
from tracerl.rollout.sampling import Sample
from tracerl.run.rejection import rejection_sample

# per task, the four completions the scripted policy writes (row i of the batch = task i // 4, sample i % 4)
SCRIPT = [["yes", "no", "yes", "crash"],   # kept 2 (identical: 1 distinct), 1 infra
          ["no", "no", "no", "no"],        # kept 0
          ["yes", "yes", "yes ok", "no"]]  # kept 3 ("yes" twice: 2 distinct)


class VerdictEnv:
    name, revision = "verdict", "1"

    def reset(self, task, seed):
        return [{"role": "user", "content": str(task.prompt)}]

    def step(self, action_text):
        if "crash" in action_text:
            return Step(terminated=True, terminal_reason=TerminalReason.INFRA_FAILURE, info={"fault": "tool_crash"})
        return Step(terminated=True, terminal_reason=TerminalReason.EOS,
                    reward_components={"correct": float(action_text.startswith("yes"))})

    def state_hash(self):
        return "s"


class ScriptedEngine:
    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    def generate(self, prompts, **kw):
        out = []
        for i in range(len(prompts)):
            ids = self.tokenizer(SCRIPT[i // 4][i % 4], add_special_tokens=False)["input_ids"]
            out.append(Sample(list(ids), [-0.5] * len(ids), "stop"))
        return out


def test_kept_and_total_counts_by_hand(tiny):
    _, tok = tiny
    base = get_env("math_tool")
    spec = EnvSpec(name="verdict", revision="1", make=VerdictEnv, generate=base.generate, expert=base.expert,
                   reward_weights={"correct": 1.0}, stop_strings=())
    tasks = [Task(id=f"t{i}", source="test", prompt=f"question {i}") for i in range(3)]
    examples, counts, trajs = rejection_sample(ScriptedEngine(tok), spec, tasks, samples=4,
                                               budgets=LoopBudgets(max_turns=1, max_tokens=64, max_new_tokens=8),
                                               sampling={"temperature": 1.0, "top_p": 1.0, "top_k": 0}, seed=0,
                                               policy_version=3)
    # kept: 2 (task 0) + 0 (task 1) + 3 (task 2) = 5 of 3 * 4 = 12; 1 infra; tasks with a kept sample: t0, t2
    # distinct kept completions: t0 {"yes"} + t2 {"yes", "yes ok"} = 3
    assert counts == {"rft/total": 12.0, "rft/kept": 5.0, "rft/kept_rate": 5 / 12, "rft/infra": 1.0,
                      "rft/tasks": 3.0, "rft/tasks_kept": 2.0, "rft/distinct_kept": 3.0}
    assert len(trajs) == 12 and len(examples) == 5
    for ids, roles in examples:  # trained as sampled: the ACTION tokens are the policy's own ids
        action = [i for i, r in zip(ids, roles) if r == TokenRole.ACTION]
        assert tok.decode(action).startswith("yes")
        assert roles[0] != TokenRole.ACTION


def test_rft_stage_from_the_cli_counts_and_trains(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    rc = main(["train", "smoke", "stages=[sft,eval,rft,eval]", "run.threads=1", "sft.rejection.samples=2",
               "sft.rejection.max_tasks=16", "run.dir=run"])
    assert rc == 0
    out = capsys.readouterr().out
    assert "rft: rejection sampling kept" in out and "of 32 completions" in out
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    rft = [r for r in rows if r.get("stage") == "rft" and "rft/total" in r.get("metrics", r)]
    assert rft, rows[:3]
    m = rft[0].get("metrics", rft[0])
    assert m["rft/total"] == 32 and 0 <= m["rft/kept"] <= 32
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert [e["after"] for e in summary["evals"]] == ["sft", "rft"]
