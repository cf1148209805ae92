import json

import numpy as np
import pytest

from tracerl.tasks import (CurriculumConfig, CurriculumSampler, DifficultyProfile, FilterConfig, MixtureSampler,
                           UniformSampler, apply_filters)
from tracerl.tasks.samplers import allocate


def pool(make_task, sources=("a", "b", "c"), per_source=10, words=6):
    return [make_task(f"{s}{i}", " ".join([f"{s}{i}"] * words), source=s) for s in sources for i in range(per_source)]


def graded_pool(make_task, sources=("math", "code"), per_level=40):
    """Tasks at pass rates 0, 1/8, ..., 1 (9 levels), `per_level` of each, per source; and their profile."""
    prof, tasks = DifficultyProfile(), []
    for s in sources:
        for level in range(9):
            for i in range(per_level):
                t = make_task(f"{s}-{level}-{i}", f"{s} problem {level} {i}", source=s)
                prof.record(t.id, level, 8)
                tasks.append(t)
    return tasks, prof


def test_uniform_covers_every_task_once_per_epoch(make_task):
    tasks = pool(make_task, sources=("a",), per_source=12)
    s = UniformSampler(tasks, seed=3)
    epoch = [t.id for _ in range(3) for t in s.next_batch(4)]
    assert sorted(epoch) == sorted(t.id for t in tasks)
    nxt = [t.id for t in s.next_batch(12)]
    assert sorted(nxt) == sorted(epoch) and nxt != epoch  # a fresh permutation


def test_allocate_tracks_weights_with_carried_remainders():
    # weights 1/3, 2/3 and one draw per batch: credits go (1/3, 2/3) -> b, (2/3, 1/3) -> a, (0, 1) -> b
    credit: dict[str, float] = {}
    picks = ["".join(k for k, v in allocate(1, {"a": 1.0, "b": 2.0}, credit).items() if v) for _ in range(6)]
    assert picks == ["b", "a", "b", "b", "a", "b"]


def test_mixture_reports_observed_weights_after_filtering_next_to_targets(make_task):
    tasks = pool(make_task, words=6)
    tasks = [t if t.source != "c" else make_task(t.id, "too short", source="c") for t in tasks]
    kept = apply_filters(tasks, FilterConfig(min_prompt_words=3)).kept  # every task of source c goes
    sampler = MixtureSampler(kept, {"a": 0.5, "b": 0.3, "c": 0.2}, seed=0)
    batches = [sampler.next_batch(10) for _ in range(8)]
    # c cannot be drawn: a and b are renormalized to 0.5/0.8 = 0.625 and 0.375 -> 6.25 and 3.75 per batch
    assert sum(len(b) for b in batches) == 80
    report = {r["source"]: r for r in sampler.report()}
    assert {s: (r["target"], r["observed"]) for s, r in report.items()} == {
        "a": (0.5, 0.625), "b": (0.3, 0.375), "c": (0.2, 0.0)}
    assert {s: (r["pool_tasks"], r["pool_share"], r["drawn"]) for s, r in report.items()} == {
        "a": (10, 0.5, 50), "b": (10, 0.5, 30), "c": (0, 0.0, 0)}


def test_mixture_without_filtering_draws_exact_shares_each_batch(make_task):
    sampler = MixtureSampler(pool(make_task), {"a": 5, "b": 3, "c": 2}, seed=1)
    for _ in range(10):
        batch = sampler.next_batch(10)
        assert [sum(t.source == s for t in batch) for s in "abc"] == [5, 3, 2]
    assert [r["observed"] for r in sampler.report()] == [0.5, 0.3, 0.2]


def test_curriculum_pass_rate_distribution_moves_as_configured(make_task):
    tasks, prof = graded_pool(make_task)
    cfg = CurriculumConfig(mean_start=0.8, mean_end=0.2, std=0.15, steps=50)
    sampler = CurriculumSampler(tasks, prof, cfg, {"math": 0.75, "code": 0.25}, seed=7)
    rates = {"math": [], "code": []}
    expected = {"math": [], "code": []}
    for step in range(100):
        batch = sampler.next_batch(16)
        counts = {s: sum(t.source == s for t in batch) for s in rates}
        assert counts == {"math": 12, "code": 4}  # the domain ratio holds at every step
        for s in rates:
            rates[s].append([prof.pass_rate(t.id) for t in batch if t.source == s])
            expected[s].append(float(sampler.probabilities(s, step) @ sampler.pass_rates[s]))
    assert sampler.mean_at(0) == 0.8 and sampler.mean_at(25) == pytest.approx(0.5) and sampler.mean_at(80) == 0.2
    for s, per_batch in (("math", 12), ("code", 4)):
        for lo, hi in ((0, 10), (20, 30), (50, 100)):
            got = np.mean([r for step in range(lo, hi) for r in rates[s][step]])
            want = np.mean(expected[s][lo:hi])
            # pass rates under the Gaussian have std ≈ 0.15; the standard error of the window
            # mean is ≤ 0.15 / sqrt(10 · 4) ≈ 0.024 for code, so 0.075 is > 3 standard errors
            assert abs(got - want) < 0.075, (s, lo, hi, got, want)
        early = np.mean([r for step in range(10) for r in rates[s][step]])
        late = np.mean([r for step in range(50, 100) for r in rates[s][step]])
        assert early > 0.65 and late < 0.3, (s, early, late)


def test_curriculum_counts_unprofiled_tasks(make_task):
    tasks, prof = graded_pool(make_task, sources=("math",), per_level=2)
    extra = make_task("new", "a task nobody profiled", source="math")
    sampler = CurriculumSampler(tasks + [extra], prof, CurriculumConfig(unprofiled_pass_rate=0.3))
    assert sampler.unprofiled == 1 and sampler.pass_rates["math"][-1] == 0.3


def _samplers(make_task):
    tasks, prof = graded_pool(make_task, per_level=3)
    return {
        "uniform": lambda: UniformSampler(tasks, seed=5),
        "mixture": lambda: MixtureSampler(tasks, {"math": 2, "code": 1}, seed=5),
        "curriculum": lambda: CurriculumSampler(tasks, prof, CurriculumConfig(steps=4), {"math": 2, "code": 1}, seed=5),
    }


@pytest.mark.parametrize("kind", ["uniform", "mixture", "curriculum"])
def test_resumed_sampler_reproduces_the_next_batches_exactly(make_task, kind):
    build = _samplers(make_task)[kind]
    original = build()
    for _ in range(7):  # past an epoch boundary for uniform (54 tasks, 7 × 10 = 70 draws)
        original.next_batch(10)
    saved = json.loads(json.dumps(original.state_dict()))  # what the checkpoint stores
    expected = [[t.id for t in original.next_batch(10)] for _ in range(3)]
    resumed = build()
    resumed.next_batch(10)  # a fresh process would not have drawn this; loading must override it
    resumed.load_state_dict(saved)
    assert [[t.id for t in resumed.next_batch(10)] for _ in range(3)] == expected


def test_state_of_another_pool_is_refused(make_task):
    a = UniformSampler(pool(make_task, sources=("a",)), seed=0)
    b = UniformSampler(pool(make_task, sources=("b",)), seed=0)
    with pytest.raises(ValueError, match="different task pool"):
        b.load_state_dict(a.state_dict())
    with pytest.raises(ValueError, match="not 'mixture'"):
        MixtureSampler(pool(make_task, sources=("a",))).load_state_dict(a.state_dict())
