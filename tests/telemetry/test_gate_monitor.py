"""Gates on a synthetic entropy collapse, and the other limits."""

import pytest
from pydantic import ValidationError

from tracerl.telemetry import GateMonitor, GatesConfig, GateTripped, MetricLimit


def test_all_gates_off_by_default():
    mon = GateMonitor(GatesConfig())
    assert not mon.active
    assert mon.update(0, {"policy/entropy": 0.0, "policy/approx_kl": 1e9, "rollout/truncation_rate": 1.0}) is None


def test_entropy_collapse_trips_after_patience():
    mon = GateMonitor(GatesConfig(entropy_floor=0.5, entropy_patience=3))
    # entropy halves every step from 2.0: 2, 1, 0.5, 0.25, 0.125, 0.0625 …
    trace = [2.0 * 0.5**s for s in range(8)]
    trips = []
    for step, h in enumerate(trace):
        trip = mon.update(step, {"policy/entropy": h})
        if trip:
            trips.append(trip)
            break
    # below 0.5 (strictly) from step 3 (0.25); third consecutive step below is step 5 (0.0625)
    assert len(trips) == 1
    trip = trips[0]
    assert (trip.gate, trip.step, trip.value, trip.limit) == ("entropy_floor", 5, 0.0625, 0.5)
    assert "policy/entropy" in trip.reason and "3 consecutive" in trip.reason
    err = GateTripped(trip)
    assert err.exit_code == 3 and err.trip is trip


def test_recovery_resets_the_streak_and_missing_steps_are_ignored():
    mon = GateMonitor(GatesConfig(entropy_floor=1.0, entropy_patience=2))
    assert mon.update(0, {"policy/entropy": 0.5}) is None  # streak 1
    assert mon.update(1, {"policy/entropy": 1.5}) is None  # back above: streak 0
    assert mon.update(2, {"policy/entropy": 0.5}) is None  # streak 1
    assert mon.update(3, {"reward/mean": 0.0}) is None  # not recorded: streak stays 1
    assert mon.update(4, {"policy/entropy": float("nan")}) is None
    assert mon.state_dict() == {"entropy_floor": 1}
    resumed = GateMonitor(GatesConfig(entropy_floor=1.0, entropy_patience=2))
    resumed.load_state_dict(mon.state_dict())
    assert resumed.update(5, {"policy/entropy": 0.9}).step == 5


def test_kl_ess_truncation_audit_and_extra_limits():
    cfg = GatesConfig(kl_max=0.1, ess_frac_floor=0.5, truncation_rate_max=0.3, audit_failures_max=0,
                      probe_logprob_diff_max=1e-3, extra=[MetricLimit(metric="tool/error_rate", max=0.5)])
    cases = [({"policy/approx_kl": 0.2}, "kl_max"), ({"is/ess_frac": 0.4}, "ess_frac_floor"),
             ({"rollout/truncation_rate": 0.31}, "truncation_rate_max"),
             ({"verifier/audit_failures": 1}, "audit_failures_max"),
             ({"probe/logprob_absdiff_max": 0.02}, "probe_logprob_diff_max"), ({"tool/error_rate": 0.75}, "tool/error_rate:max")]
    for metrics, gate in cases:
        trip = GateMonitor(cfg).update(7, metrics)
        assert trip is not None and trip.gate == gate
    healthy = {"policy/approx_kl": 0.1, "is/ess_frac": 0.5, "rollout/truncation_rate": 0.3,
               "verifier/audit_failures": 0, "tool/error_rate": 0.5, "probe/logprob_absdiff_max": 1e-3}
    assert GateMonitor(cfg).update(7, healthy) is None  # limits are inclusive
    # the ESS gate also reads an importance correction's own ESS stat, passed through as policy/ess_frac
    trip = GateMonitor(cfg).update(8, {"policy/ess_frac": 0.25})
    assert trip.gate == "ess_frac_floor" and "policy/ess_frac = 0.25" in trip.reason


def test_unknown_gate_key_is_rejected():
    with pytest.raises(ValidationError, match="entropy_flor"):
        GatesConfig(entropy_flor=0.1)
    assert all(f.description for f in GatesConfig.model_fields.values())


def test_async_kl_counts_staleness_and_async_ess_is_read():
    # async: policy/approx_kl is the update's drift from pi_prox (tiny), async/kl_behavior the staleness (large)
    mon = GateMonitor(GatesConfig(kl_max=0.05))
    trip = mon.update(4, {"policy/approx_kl": 1e-14, "async/kl_behavior": 0.08})
    assert trip is not None and trip.value == 0.08 and "async/kl_behavior" in trip.reason
    mon = GateMonitor(GatesConfig(kl_max=0.05))
    assert mon.update(4, {"policy/approx_kl": 0.01, "async/kl_behavior": 0.02}) is None  # both under the limit
    trip = GateMonitor(GatesConfig(kl_max=0.05)).update(1, {"policy/approx_kl": 0.06})  # sync: approx_kl alone
    assert trip is not None and trip.value == 0.06
    mon = GateMonitor(GatesConfig(ess_frac_floor=0.5))
    trip = mon.update(2, {"async/ess_frac": 0.3})  # no correction reports is/ or policy/ess_frac in plain async
    assert trip is not None and "async/ess_frac" in trip.reason
