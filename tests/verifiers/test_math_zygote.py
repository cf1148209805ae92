"""A sympy worker killed at its deadline is replaced by a fork of the warm zygote: the replacement
is the zygote's child (no fresh interpreter, no sympy re-import) and answers at once; closing the
checker leaves no worker behind."""

import os

from tracerl.verifiers import MathEquivalence


def _ppid(pid):
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def test_replacement_workers_are_warm_forks_of_the_zygote():
    with MathEquivalence(timeout_s=0.4, workers=1, spares=0) as checker:
        assert checker.equivalent("(x+1)^2", "x^2+2x+1")
        zygote, first = checker.worker_pids()
        assert _ppid(first) == zygote
        assert checker.check("(a+b+c+d+f+g+h+1)^{400}", "(a+b+c+d+f+g+h+2)^{400}").path == "deadline"
        ok = checker.check("2(x+1)", "2x+2")  # served by the replacement
        assert ok.equal and ok.path == "sympy"
        (zygote2, second) = checker.worker_pids()
        assert zygote2 == zygote and second != first and _ppid(second) == zygote
        assert not os.path.exists(f"/proc/{first}")  # killed and reaped by the zygote
    assert not os.path.exists(f"/proc/{zygote}") and not os.path.exists(f"/proc/{second}")
