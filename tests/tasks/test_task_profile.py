import json

import pytest

from tracerl.errors import UserError
from tracerl.tasks import DifficultyProfile, profile, reprofile_stage
from tracerl.tasks.profile import difficulty_bucket


def test_profile_records_successes_per_task_in_batches(make_task):
    tasks = [make_task(f"t{i}", f"task number {i}") for i in range(5)]
    calls = []

    def attempt_fn(batch, n):
        calls.append(([t.id for t in batch], n))
        return [int(t.id[1:]) * 2 for t in batch]  # t0: 0/8, t1: 2/8, ..., t4: 8/8

    prof = profile(tasks, attempt_fn, n=8, batch_size=2, policy="step_0")
    assert calls == [(["t0", "t1"], 8), (["t2", "t3"], 8), (["t4"], 8)]
    assert [prof.pass_rate(f"t{i}") for i in range(5)] == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert prof.get("t3").attempts == 8 and prof.get("t3").successes == 6
    assert prof.pass_rate("absent", 0.5) == 0.5


def test_profile_json_roundtrip_and_accumulation(tmp_path, make_task):
    prof = profile([make_task("a", "p"), make_task("b", "q")], lambda b, n: [1, 3], n=4, policy="sft")
    profile([make_task("a", "p")], lambda b, n: [4], n=4, into=prof)  # a: 1/4 then 4/4 -> 5/8
    prof.record("c", 0, 0)  # every attempt was an infrastructure failure: no pass rate
    prof.save(tmp_path / "p.json")
    strict = json.loads((tmp_path / "p.json").read_text(), parse_constant=lambda c: pytest.fail(f"{c} in JSON"))
    assert strict["tasks"]["c"] == {"attempts": 0, "successes": 0, "pass_rate": None}
    back = DifficultyProfile.load(tmp_path / "p.json")
    assert back.policy == "sft" and back.to_dict() == prof.to_dict()
    assert back.pass_rate("a") == 5 / 8 and back.pass_rate("b") == 3 / 4 and back.pass_rate("c") is None


def test_profile_rejects_impossible_counts_and_bad_files(tmp_path, make_task):
    with pytest.raises(ValueError, match="must lie in 0..8"):
        profile([make_task("a", "p")], lambda b, n: [9], n=8)
    with pytest.raises(ValueError, match="returned 2 results for 1 tasks"):
        profile([make_task("a", "p")], lambda b, n: [1, 1], n=8)
    (tmp_path / "bad.json").write_text("{\"tasks\": {\"a\": {}}}")
    with pytest.raises(UserError, match="is not a difficulty profile"):
        DifficultyProfile.load(tmp_path / "bad.json")
    with pytest.raises(UserError, match="does not exist"):
        DifficultyProfile.load(tmp_path / "none.json")


def test_reprofile_stage_removes_newly_all_pass_tasks_only(make_task):
    tasks = [make_task("easy", "e"), make_task("mid", "m"), make_task("hard", "h"),
             make_task("held", "x", split="heldout")]
    solved = {"easy": 8, "mid": 5, "hard": 0}
    seen = []

    def attempt_fn(batch, n):
        seen.extend(t.id for t in batch)
        return [solved[t.id] for t in batch]

    kept, discards, prof = reprofile_stage(tasks, attempt_fn, 8, stage="rl-2")
    assert seen == ["easy", "mid", "hard"]  # held-out tasks are not profiled
    assert [t.id for t in kept] == ["mid", "hard", "held"]
    (d,) = discards
    assert (d.task_id, d.filter, d.detail["stage"]) == ("easy", "all_pass", "rl-2")
    assert d.reason == "newly all-pass before stage 'rl-2': solved 8 of 8"
    assert prof.pass_rate("mid") == 5 / 8


def test_difficulty_buckets(make_task):
    prof = DifficultyProfile()
    for tid, s in [("z", 0), ("q", 2), ("h", 4), ("t", 7), ("o", 8)]:
        prof.record(tid, s, 8)
    got = {tid: difficulty_bucket(make_task(tid, "p"), prof) for tid in "zqhto"}
    assert got == {"z": "pass 0", "q": "pass (0,0.25]", "h": "pass (0.25,0.5]", "t": "pass (0.75,1)", "o": "pass 1"}
    assert difficulty_bucket(make_task("u", "p", difficulty=3), prof) == "difficulty 3"
    assert difficulty_bucket(make_task("u", "p", difficulty=0.3), prof) == "difficulty [0.25,0.5)"
    assert difficulty_bucket(make_task("u", "p", difficulty=1.0), prof) == "difficulty [0.75,1]"
    assert difficulty_bucket(make_task("u", "p"), None) == "unknown"
