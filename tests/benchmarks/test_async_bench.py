"""benchmarks/async.py's time-to-target is the arithmetic its docstring states: linear between the two
evaluations around the first crossing, and the seeds' curves are averaged point by point."""

import importlib.util
from pathlib import Path

import pytest

BENCH = Path(__file__).parents[2] / "benchmarks" / "async.py"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_async", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_time_to_target_interpolates_between_the_evaluations_around_the_crossing():
    b = _bench()
    curve = [(0.0, 0.2), (10.0, 0.25), (30.0, 0.35), (40.0, 0.30)]
    assert b.time_to(curve, 0.30) == pytest.approx(20.0)  # 10 + 20·(0.30 − 0.25)/0.10, not the 30 s eval
    assert b.time_to(curve, 0.35) == 30.0
    assert b.time_to(curve, 0.36) is None
    assert b.time_to([(0.0, 0.2), (5.0, 0.2), (9.0, 0.4)], 0.3) == pytest.approx(7.0)


def test_seed_curves_are_averaged_point_by_point_to_the_shortest():
    b = _bench()
    runs = [{"curve": [(0.0, 0.1), (10.0, 0.3), (20.0, 0.5)]}, {"curve": [(0.0, 0.3), (14.0, 0.5)]}]
    pooled = b.pooled_curve(runs)
    assert [(round(t, 6), round(s, 6)) for t, s in pooled] == [(0.0, 0.2), (12.0, 0.4)]
