"""code_tests' hidden tests against mutants of the reference, and repeated execution for flaky outcomes."""

from tracerl.envs import get_env
from tracerl.envs.code_tests.mutation import mutants, mutation_score, repeat_outcome, task_mutation_score


def test_mutants_by_hand():
    # x * 2: Mult -> Add gives x + 2; the constant 2 -> 3 and 1
    assert mutants("def f(x): return x * 2") == ["def f(x):\n    return x + 2", "def f(x):\n    return x * 3",
                                                  "def f(x):\n    return x * 1"]
    swapped = "def f(x):\n    return 5 if x % 2 == 0 else 3"
    assert swapped in mutants("def f(x): return 3 if x % 2 == 0 else 5")
    assert "def f(xs):\n    return min(xs)" in mutants("def f(xs): return max(xs)")


def test_score_counts_killed_mutants_and_lists_survivors():
    # cases [(2, 4)]: x + 2 = 4 survives; x * 3 = 6 and x * 1 = 2 are killed -> 2 of 3
    weak = mutation_score("def f(x): return x * 2", [(2, 4)])
    assert (weak.killed, weak.total, weak.infra) == (2, 3, 0) and weak.survivors == ["def f(x):\n    return x + 2"]
    # adding (3, 6) kills x + 2 (= 5) as well
    strong = mutation_score("def f(x): return x * 2", [(2, 4), (3, 6)])
    assert (strong.killed, strong.total, strong.score) == (3, 3, 1.0)


def test_the_shipped_hidden_tests_kill_most_mutants():
    tasks = get_env("code_tests").generate("heldout", 6, 0)
    reports = [task_mutation_score(t) for t in tasks]
    assert sum(r.infra for r in reports) == 0
    assert sum(r.killed for r in reports) / sum(r.total for r in reports) >= 0.8


def test_repeated_execution_tells_flaky_from_stable():
    cases = [(i, i + 3) for i in range(5)]
    assert repeat_outcome("def f(x): return x + 3", cases, runs=3).verdict == "pass"
    assert repeat_outcome("def f(x): return x", cases, runs=3).verdict == "fail"
    # wrong with probability 1/2 per case: 8 runs agree on the passed count with probability < 1e-3
    flaky = repeat_outcome("import random\ndef f(x): return x + 3 if random.SystemRandom().random() < 0.5 else x",
                           cases, runs=8)
    assert flaky.verdict == "flaky" and flaky.infra_runs == 0 and len(set(flaky.passed)) > 1
