import json

import pytest

from tracerl.tasks import UniformSampler, dynamic_sample

# Rewards of a group of 4 by task kind: M(ixed) has variance, P(ass) and F(ail) do not.
GROUPS = {"M": [1.0, 0.0, 1.0, 0.0], "P": [1.0] * 4, "F": [0.0] * 4}


def cycling(make_task, pattern):
    """draw(k) that walks a fixed repeating sequence of tasks, so every count can be worked out by hand."""
    tasks = [make_task(f"{kind}{i}", f"task {i}") for i, kind in enumerate(pattern)]
    state = {"pos": 0, "sizes": []}

    def draw(k):
        state["sizes"].append(k)
        out = [tasks[(state["pos"] + j) % len(tasks)] for j in range(k)]
        state["pos"] += k
        return out

    return draw, state


def rollout(tasks):
    return [GROUPS[t.id[0]] for t in tasks]


def test_oversamples_until_enough_mixed_groups_and_reports_cost(make_task):
    draw, state = cycling(make_task, "MPFM")
    batch = dynamic_sample(draw, rollout, 4, max_rounds=4, cost=lambda g: 10.0)
    # round 1 draws 4 (M P F M): keeps 2, keep rate 2/4; round 2 draws ceil(2 / 0.5) = 4 more: keeps 2
    assert state["sizes"] == [4, 4]
    assert [t.id for t, _ in batch.groups] == ["M0", "M3", "M0", "M3"]
    r = batch.report
    assert (r.rounds, r.groups_generated, r.rollouts_generated, r.kept_groups) == (2, 8, 32, 4)
    assert r.zero_variance_groups == {"1": 2, "0": 2} and r.surplus_groups == 0
    assert r.filled and r.oversampling == 2.0 and (r.cost, r.cost_kept) == (80.0, 40.0)
    json.dumps(r.as_dict())  # goes to the metrics log as is


def test_round_size_follows_the_keep_rate_but_never_exceeds_one_batch(make_task):
    draw, state = cycling(make_task, "MFFFFFFF")
    batch = dynamic_sample(draw, rollout, 4, max_rounds=3)
    # round 1: 4 drawn, 1 kept (rate 1/4), deficit 3 -> ceil(3 / 0.25) = 12, capped at 4; the same again
    assert state["sizes"] == [4, 4, 4]
    assert batch.report.kept_groups == 2 and not batch.report.filled  # capped: the batch comes back short
    assert batch.report.zero_variance_groups == {"0": 10}


def test_cap_with_padding_fills_the_batch_with_zero_variance_groups(make_task):
    draw, _ = cycling(make_task, "FP")
    short = dynamic_sample(draw, rollout, 3, max_rounds=2)
    assert short.groups == [] and short.report.rounds == 2 and short.report.groups_generated == 6
    draw, _ = cycling(make_task, "FP")
    padded = dynamic_sample(draw, rollout, 3, max_rounds=2, pad_with_zero_variance=True)
    assert [t.id for t, _ in padded.groups] == ["F0", "P1", "F0"] and padded.report.padded_groups == 3


def test_mixed_groups_beyond_the_target_are_counted_as_surplus(make_task):
    draw, state = cycling(make_task, "PPMMMMMM")
    batch = dynamic_sample(draw, rollout, 3)
    # round 1: P P M (1 kept, rate 1/3); round 2: ceil(2 / (1/3)) = 6, capped at 3: M M M, one too many
    assert state["sizes"] == [3, 3]
    assert [t.id for t, _ in batch.groups] == ["M2", "M3", "M4"]
    assert (batch.report.kept_groups, batch.report.surplus_groups, batch.report.groups_generated) == (3, 1, 6)


def test_custom_group_objects_and_errors(make_task):
    draw, _ = cycling(make_task, "M")
    batch = dynamic_sample(draw, lambda ts: [{"r": GROUPS["M"], "tokens": 7} for _ in ts], 2,
                           rewards=lambda g: g["r"], cost=lambda g: g["tokens"])
    assert batch.report.cost == 14.0 and batch.groups[0][1]["tokens"] == 7
    with pytest.raises(ValueError, match="returned 0 groups for 2 tasks"):
        dynamic_sample(draw, lambda ts: [], 2)


def test_dynamic_sampling_over_a_resumed_sampler_draws_the_same_groups(make_task):
    kinds = "MPF"
    tasks = [make_task(f"{kinds[i % 3]}{i}", f"task {i}") for i in range(30)]
    first = UniformSampler(tasks, seed=11)
    dynamic_sample(first.next_batch, rollout, 4)
    saved = json.loads(json.dumps(first.state_dict()))
    expected = [t.id for t, _ in dynamic_sample(first.next_batch, rollout, 4).groups]
    second = UniformSampler(tasks, seed=11)
    second.load_state_dict(saved)
    assert [t.id for t, _ in dynamic_sample(second.next_batch, rollout, 4).groups] == expected


def test_next_groups_switches_on_the_sampler_kind(make_task):
    from tracerl.tasks import SamplerConfig, next_groups

    draw, state = cycling(make_task, "MPF")
    plain = next_groups(SamplerConfig(kind="uniform"), draw, rollout, 3, cost=lambda g: 5.0)
    # uniform: exactly 3 tasks drawn and all 3 groups kept; the all-equal ones are counted, not dropped
    assert [t.id for t, _ in plain.groups] == ["M0", "P1", "F2"] and state["sizes"] == [3]
    assert plain.report.zero_variance_groups == {"1": 1, "0": 1} and (plain.report.cost, plain.report.cost_kept) == (15.0, 15.0)
    draw, state = cycling(make_task, "MPF")
    dyn = next_groups(SamplerConfig(kind="dynamic", dynamic={"max_rounds": 2}), draw, rollout, 2)
    # dynamic: round 1 draws M0 P1 and keeps M0 (rate 1/2); round 2 draws ceil(1 / 0.5) = 2: F2 M0 -> M0 kept
    assert [t.id for t, _ in dyn.groups] == ["M0", "M0"] and state["sizes"] == [2, 2]
