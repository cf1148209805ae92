"""The real console script, run as a subprocess (what a user types)."""

import json
import subprocess
import sys
from pathlib import Path

TRACERL = str(Path(sys.executable).parent / "tracerl")


def run(*args):
    return subprocess.run([TRACERL, "tasks", *args], capture_output=True, text=True, timeout=60)


def test_tasks_check_exit_codes(write_jsonl, tmp_path):
    ok = write_jsonl([{"id": "a", "prompt": "What is 2 + 2?", "answer": "4", "license": "MIT"}], "ok.jsonl")
    bad = write_jsonl([{"id": "a", "prompt": "What is 2 + 2?", "answer": "4", "license": "MIT"},
                       "{oops", {"id": "b", "prompt": "What is 3 + 3?", "license": "MIT"}], "bad.jsonl")
    r = run("check", str(ok))
    assert r.returncode == 0 and r.stdout == "" and "1 good rows, 0 bad rows" in r.stderr
    r = run("check", str(bad))
    assert r.returncode == 1
    assert r.stdout.splitlines() == [f"{bad}: line 2: not valid JSON (Expecting property name enclosed in double "
                                     "quotes at column 2)",
                                     f"{bad}: line 3: the row needs an `answer` or `tests` (both are missing or null)"]
    r = run("check", str(tmp_path / "missing.jsonl"))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip() == f"tracerl: error: task file '{tmp_path / 'missing.jsonl'}' does not exist; check the path"


def test_tasks_stats_prints_pre_and_post_filter_distributions(write_jsonl, tmp_path):
    rows = [{"id": f"t{i}", "prompt": f"Compute {i} plus {i} and reply with digits.", "answer": str(2 * i),
             "license": "MIT"} for i in range(4)]
    rows.append({"id": "dup", "prompt": "compute 0 PLUS 0, and reply with digits", "answer": "0", "license": "MIT"})
    path = write_jsonl(rows)
    prof = {"policy": "p", "meta": {}, "tasks": {"t0": {"attempts": 8, "successes": 8}, "t1": {"attempts": 8, "successes": 2},
                                                 "t2": {"attempts": 8, "successes": 0}}}
    (tmp_path / "prof.json").write_text(json.dumps(prof))
    r = run("stats", str(path), "--profile", str(tmp_path / "prof.json"), "--filter", "exact_duplicates=true",
            "--filter", "all_pass=true")
    assert r.returncode == 0, r.stderr
    table = {tuple(line.split()[2:-2]): tuple(map(int, line.split()[-2:])) for line in r.stdout.splitlines()[1:]
             if line.startswith("tasks [train]")}
    # t0 all-pass and dup (of t0, unprofiled) are dropped; t1 (2/8), t2 (0/8), t3 (unprofiled) stay
    assert table == {("pass", "(0,0.25]"): (1, 1), ("pass", "0"): (1, 1), ("pass", "1"): (1, 0),
                     ("unknown",): (2, 1), ("total",): (5, 3)}
    assert "discarded: exact_duplicate 1, all_pass 1" in r.stdout
    r = run("stats", str(path), "--filter", "no_such_filter=1")
    assert r.returncode == 2 and "no_such_filter" in r.stderr and "Traceback" not in r.stderr


def test_tasks_stats_reports_source_shares_after_filtering_next_to_targets(write_jsonl, tmp_path, capsys):
    from tracerl.cli import main

    a = write_jsonl([{"id": f"a{i}", "prompt": "too short" if i % 2 else "a prompt long enough to keep",
                      "answer": "1"} for i in range(10)], "mixa.jsonl")
    b = write_jsonl([{"id": f"b{i}", "prompt": "another prompt long enough to keep", "answer": "1"}
                     for i in range(10)], "mixb.jsonl")
    (tmp_path / "tasks.yaml").write_text(
        "tasks:\n"
        f"  sources: [{{path: '{a}', license: MIT}}, {{path: '{b}', license: MIT}}]\n"
        "  filters: {min_prompt_words: 4}\n"
        "  sampler: {kind: mixture, weights: {mixa: 0.6, mixb: 0.4}}\n")
    assert main(["tasks", "stats", str(tmp_path / "tasks.yaml")]) == 0
    out = capsys.readouterr().out
    shares = {line.split()[0]: line.split()[1:] for line in out.splitlines() if line.startswith("mix")
              and "[" not in line}
    # the 5 short prompts of mixa go: mixa falls from 10/20 to 5/15 of the pool while its target is 0.6
    assert shares == {"mixa": ["0.600", "0.500", "0.333"], "mixb": ["0.400", "0.500", "0.667"]}
    assert "discarded: too_short 5" in out
