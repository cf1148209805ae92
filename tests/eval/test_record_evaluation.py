"""record_evaluation: numbers beside their protocol, episodes and metrics named by the column."""

import json

import pytest

from tracerl.contract import TerminalReason, TokenRole, Trajectory, ids_sha256
from tracerl.eval.protocol import Protocol, results_dir
from tracerl.eval.record import record_evaluation
from tracerl.store import RunDir


def episode(task, i, correct, answer):
    t = Trajectory(trajectory_id=f"{task}-{i}", group_id=f"eval-{task}", task_id=task, env_name="toy", split="heldout")
    t.append([1], TokenRole.PROMPT)
    s, e = t.append([2, 3], TokenRole.ACTION, logprobs=[-0.1, -0.2], policy_version=5)
    t.add_span("action", s, e, sampled_ids_sha256=ids_sha256([2, 3]))
    t.set_reward({"correct": float(correct)}, {"correct": 1.0})
    t.verifier_output = {"answer": answer}
    t.finish(TerminalReason.EOS)
    return t


def test_record_evaluation_writes_logs_and_stores(tmp_path):
    proto = Protocol(checkpoint_sha256="c" * 64, tokenizer_sha256="t" * 64, chat_template_sha256="h" * 64,
                     env_name="toy", env_revision="1", verifier_revision="1", tasks_sha256="x" * 64, num_tasks=2,
                     sampling={"temperature": 1.0}, budgets={"max_turns": 1}, n=3, ks=[1, 3])
    # task a: ✓ ✗ ✓ (answers 4, 5, 4); task b: ✗ ✗ ✗
    trajs = [episode("a", 0, 1, "4"), episode("a", 1, 0, "5"), episode("a", 2, 1, "4"),
             episode("b", 0, 0, "1"), episode("b", 1, 0, "2"), episode("b", 2, 0, "2")]
    run = RunDir(tmp_path / "run", create=True)
    res = record_evaluation(run.path, proto, trajs, run=run, step=7, extra={"wall_s": 1.5})
    # avg@3 = (2/3 + 0) / 2 = 1/3; pass@3: a 1, b 0 → 0.5; maj@3: a "4" ✓, b "2" ✗ → 0.5
    assert res["avg@3"] == pytest.approx(1 / 3) and res["pass@3"] == pytest.approx(0.5)
    assert res["maj@3"] == pytest.approx(0.5) and res["wall_s"] == 1.5
    saved = json.loads((results_dir(run.path, proto) / "results.json").read_text())
    assert saved["protocol_sha256"] == proto.sha256 and saved["results"]["pass@1"] == pytest.approx(1 / 3)
    row = json.loads(run.metrics_path.read_text().splitlines()[-1])
    assert row["stage"] == "eval" and row["step"] == 7 and row["eval/pass@3"] == pytest.approx(0.5)
    assert row["tags"] == {"eval/protocol": proto.column}  # the protocol beside the numbers, not in their names
    assert run.store.count(stage=f"eval/{proto.column}") == 6
    run.close()
