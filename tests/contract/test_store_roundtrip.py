"""The store round trip is lossless: ids, roles and log-probs come back bit-for-bit."""

import json
import math
import struct

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tracerl.contract import TokenRole, to_dict, from_dict, validate
from tracerl.store import RunDir, Store



def _bits(x: float) -> bytes:
    return struct.pack("<d", x)


def test_store_round_trip_is_bit_exact(tmp_path, traj):
    traj.behavior_logprobs[3] = -1.0000000000000002  # a value float32 would round
    traj.spans[0].sampled_ids_sha256 = traj.spans[0].sampled_ids_sha256
    with Store(tmp_path / "s.sqlite") as store:
        store.add_trajectories([traj], stage="rl", step=7)
        (back,) = list(store.trajectories(stage="rl", step=7))
    assert back.token_ids == traj.token_ids
    assert back.roles == traj.roles and all(isinstance(r, TokenRole) for r in back.roles)
    assert [_bits(x) for x in back.behavior_logprobs] == [_bits(x) for x in traj.behavior_logprobs]
    assert back.policy_versions == traj.policy_versions
    assert back.spans == traj.spans
    assert back.reward_components == traj.reward_components
    assert back.terminal_reason == traj.terminal_reason
    validate(back)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.floats(min_value=-50, max_value=0, allow_nan=False, width=64), min_size=1, max_size=20))
def test_round_trip_any_logprobs(tmp_path_factory, make_traj, lps):
    t = make_traj("h")
    from tracerl.contract import ids_sha256

    ids = list(range(100, 100 + len(lps)))
    s, e = t.append(ids, TokenRole.ACTION, logprobs=lps, policy_version=5)
    t.add_span("action", s, e, sampled_ids_sha256=ids_sha256(ids))
    path = tmp_path_factory.mktemp("s") / "s.sqlite"
    with Store(path) as store:
        store.add_trajectories([t], stage="rl", step=0)
        (back,) = list(store.trajectories())
    assert [_bits(x) for x in back.behavior_logprobs[-len(lps):]] == [_bits(x) for x in lps]


def test_json_dict_round_trip_uses_lowercase_roles(traj):
    d = json.loads(json.dumps(to_dict(traj)))
    assert d["roles"][:4] == ["prompt", "prompt", "prompt", "action"]
    assert d["behavior_logprobs"][0] is None
    back = from_dict(d)
    assert back.roles == traj.roles
    assert math.isnan(back.behavior_logprobs[0]) and back.behavior_logprobs[3] == -0.5


def test_invalid_trajectory_is_never_stored(tmp_path, traj):
    traj.reward = 5.0
    with Store(tmp_path / "s.sqlite") as store:
        try:
            store.add_trajectories([traj], stage="rl", step=0)
        except ValueError:
            pass
        assert store.count() == 0


def test_rundir_metrics_and_events(tmp_path):
    run = RunDir(tmp_path / "r", create=True)
    run.log_metrics({"reward/mean": 0.5, "bad": float("nan")}, stage="rl", step=1)
    run.store.add_event("gate", "entropy below floor", stage="rl", step=1, payload={"gate": "entropy"})
    assert run.read_metrics() == [{"stage": "rl", "step": 1, "reward/mean": 0.5, "bad": None}]
    assert run.store.metrics("reward/mean")[0]["value"] == 0.5
    assert run.store.events("gate")[0]["payload"] == {"gate": "entropy"}
    run.close()
