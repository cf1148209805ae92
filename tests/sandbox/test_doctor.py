"""`tracerl doctor` proves each protection with a live attack and reports the level."""

import json

from tracerl.cli import main


def test_doctor_reports_level_and_every_live_check_passes(capsys):
    assert main(["doctor", "--json", "--require", "full"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["level"] == "full"
    assert {c["check"] for c in report["checks"]} >= {"no network", "host files hidden", "wall clock", "memory cap"}
    assert all(c["ok"] for c in report["checks"]), report["checks"]
    assert report["verifier_worker"]["ok"]
