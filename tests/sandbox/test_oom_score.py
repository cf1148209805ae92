"""The OOM score a program runs at, and whether `isolation_report()` tells the truth about it."""

from __future__ import annotations

import pytest

from tracerl.sandbox import Sandbox, cgroups

LOWER = ("print(open('/proc/self/oom_score_adj').read().strip())\n"
         "try:\n    open('/proc/self/oom_score_adj', 'w').write('0')\nexcept OSError as e:\n    print('refused')\n"
         "print(open('/proc/self/oom_score_adj').read().strip())")


@pytest.fixture(scope="module")
def box():
    with Sandbox() as s:
        if s.level != "full":
            pytest.skip("needs full isolation")
        yield s


def test_programs_start_first_in_line_for_the_oom_killer(box):
    assert box.run(LOWER).stdout.splitlines()[0] == "1000"


def test_the_report_says_whether_a_program_can_lower_its_score(box):
    """Where the floor is pinned the write is refused and the score stays 1000; elsewhere the
    program does lower it, and the report lists that as missing (never claims it)."""
    lines = box.run(LOWER).stdout.splitlines()
    report = box.isolation_report()
    pinned, _ = cgroups.oom_floor_pinned()
    claimed = any(e.startswith("OOM score") for e in report["enforced"])
    if pinned and box.plan.run_as is not None:
        assert lines[1:] == ["refused", "1000"] and claimed
    else:
        assert lines[1:] == ["0"] and not claimed
        assert any(m.startswith("OOM score not pinned") for m in report["missing"])
