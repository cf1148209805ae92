"""The agent loop under failing rows, hung tools and retries: only the bad episode ends, as
infra_failure labelled by kind; the watchdog names the stuck component; a retried episode records
which attempt it is and why the earlier ones failed; infra episodes leave the group baseline."""

import time

import pytest

from tracerl.algorithms.batch import collate
from tracerl.contract import TerminalReason
from tracerl.contract.task import Task
from tracerl.envs import EnvSpec, Step, get_env
from tracerl.config.faults import FaultsConfig
from tracerl.rollout.faults import count_faults, wrap_engine
from tracerl.rollout import LoopBudgets, TorchEngine, run_episodes
from tracerl.rollout.engine import StatelessSession
from tracerl.rollout.guard import Watchdog

SAMPLING = {"temperature": 1.0, "top_p": 1.0, "top_k": 0}
BUDGETS = LoopBudgets(max_turns=1, max_tokens=96, max_new_tokens=6)


class OneStep:
    """One turn: reward 1 for any action; `hang` sleeps first; `fail_first` fails each task's first N steps."""

    name, revision = "onestep", "1"
    hang, fail_first, calls = 0.0, 0, {}

    def reset(self, task, seed):
        self.task_id = task.id
        return [{"role": "user", "content": str(task.prompt)}]

    def step(self, text):
        n = OneStep.calls[self.task_id] = OneStep.calls.get(self.task_id, 0) + 1
        if self.hang:
            time.sleep(self.hang)
        if n <= self.fail_first:
            return Step(terminated=True, terminal_reason=TerminalReason.INFRA_FAILURE,
                        info={"fault": "tool_crash", "error": "crashed"})
        return Step(terminated=True, terminal_reason=TerminalReason.EOS, reward_components={"correct": 1.0})

    def state_hash(self):
        return "s"


def _spec(**attrs):
    OneStep.calls = {}
    env = type("Env", (OneStep,), attrs)
    base = get_env("math_tool")
    return EnvSpec(name="onestep", revision="1", make=env, generate=base.generate, expert=base.expert,
                   reward_weights={"correct": 1.0}, stop_strings=())


TASKS = [Task(id=f"t{i}", source="test", prompt=f"question {i}") for i in range(6)]


class FailRows(TorchEngine):
    """Sessions whose generate raises whenever row 2 or 5 is in the call."""

    def open_session(self):
        inner = StatelessSession(self)

        class S:
            def generate(self, keys, seqs, **kw):
                if {2, 5} & set(keys):
                    raise RuntimeError(f"CUDA error on rows {sorted({2, 5} & set(keys))}")
                return inner.generate(keys, seqs, **kw)
        return S()


def test_a_failing_generate_ends_only_its_rows_episodes(tiny):
    model, tok = tiny
    trajs = run_episodes(FailRows(model, tok), _spec(), TASKS, [f"g{i // 3}" for i in range(6)], budgets=BUDGETS,
                         sampling=SAMPLING, policy_version=0, seed=0)
    infra = [i for i, t in enumerate(trajs) if t.terminal_reason == TerminalReason.INFRA_FAILURE]
    assert infra == [2, 5]
    assert all(trajs[i].verifier_output["fault"] == "engine_error" and "CUDA error" in trajs[i].verifier_output["error"]
               for i in infra)
    assert [t.reward for t in trajs] == [1.0, 1.0, 0.0, 1.0, 1.0, 0.0]  # never rewarded
    batch = collate(trajs, pad_id=tok.pad_token_id)
    # groups g0 = rows 0-2, g1 = rows 3-5: the failed row of each is out of its baseline and its loss
    assert batch.baseline_B.tolist() == [True, True, False, True, True, False]
    assert batch.weight_B.tolist() == [1.0, 1.0, 0.0, 1.0, 1.0, 0.0]


def test_injected_engine_errors_are_reproducible_and_counted(tiny):
    model, tok = tiny
    eng = wrap_engine(TorchEngine(model, tok), FaultsConfig(engine_error=0.5, seed=3))
    runs = [run_episodes(eng, _spec(), TASKS * 2, ["g"] * 12, budgets=BUDGETS, sampling=SAMPLING,
                         policy_version=0, seed=1) for _ in range(2)]
    counts = [count_faults(r) for r in runs]
    assert counts[0] == counts[1] and 0 < counts[0]["engine_error"] < 12 and set(counts[0]) == {"engine_error"}
    assert wrap_engine(eng.inner, FaultsConfig()) is eng.inner


def test_the_watchdog_names_the_stuck_tool_call_and_the_timeout_costs_one_call(tiny):
    model, tok = tiny
    reports = []
    budgets = LoopBudgets(max_turns=1, max_tokens=96, max_new_tokens=6, step_timeout_s=1.5)
    t0 = time.monotonic()
    trajs = run_episodes(TorchEngine(model, tok), _spec(hang=5.0), TASKS[:2], ["g", "g"], budgets=budgets,
                         sampling=SAMPLING, policy_version=0, seed=0, watchdog=Watchdog(0.3, reports.append))
    assert time.monotonic() - t0 < 4.5  # both hung steps cost one timeout, not 2 x 5 s
    assert [t.terminal_reason for t in trajs] == [TerminalReason.INFRA_FAILURE] * 2
    assert len(reports) == 1 and reports[0].startswith("watchdog: env.step (onestep) of episode ")
    assert "(task t0)" in reports[0] and "(task t1)" in reports[0] and "past its 0.3 s budget" in reports[0]


def test_a_quick_phase_is_not_reported():
    reports = []
    with Watchdog(0.5, reports.append).phase("engine.generate of 1 rows"):
        pass
    time.sleep(0.6)
    assert reports == []


@pytest.mark.parametrize("retries,fail_first,attempt,failed", [(0, 1, 0, True), (2, 1, 1, False), (2, 2, 2, False),
                                                                 (2, 99, 2, True)])
def test_retries_record_attempt_and_lineage(tiny, retries, fail_first, attempt, failed):
    model, tok = tiny
    budgets = LoopBudgets(max_turns=1, max_tokens=96, max_new_tokens=6, infra_retries=retries)
    trajs = run_episodes(TorchEngine(model, tok), _spec(fail_first=fail_first), TASKS[:3], ["g"] * 3,
                         budgets=budgets, sampling=SAMPLING, policy_version=0, seed=0)
    # each task fails its first `fail_first` tries; with r retries it is tried min(fail_first, r) + 1 times
    assert [t.attempt for t in trajs] == [attempt] * 3
    assert [t.task_id for t in trajs] == ["t0", "t1", "t2"] and {t.group_id for t in trajs} == {"g"}
    assert [t.terminal_reason == TerminalReason.INFRA_FAILURE for t in trajs] == [failed] * 3
    for t in trajs:
        assert len(t.retry_lineage) == attempt and len(set(t.retry_lineage)) == attempt
        assert all(f": attempt {n}: tool_crash" in line for n, line in enumerate(t.retry_lineage))
        assert t.trajectory_id not in "".join(t.retry_lineage)


def test_entropy_is_listed_for_an_episode_whose_first_generate_failed(tiny):
    model, tok = tiny
    entropy = {}
    trajs = run_episodes(FailRows(model, tok), _spec(), TASKS, ["g"] * 6, budgets=BUDGETS, sampling=SAMPLING,
                         policy_version=0, seed=0, entropy_out=entropy)
    assert set(entropy) == {t.trajectory_id for t in trajs}
    assert [len(entropy[t.trajectory_id]) == t.num_action_tokens for t in trajs] == [True] * 6
    assert entropy[trajs[2].trajectory_id] == []
