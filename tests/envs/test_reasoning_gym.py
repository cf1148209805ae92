import builtins
import functools
import random

import pytest

pytest.importorskip("reasoning_gym")

from tracerl.contract.roles import TerminalReason  # noqa: E402
from tracerl.envs import get_env  # noqa: E402
from tracerl.envs.reasoning_gym import audit_cases, generate  # noqa: E402
from tracerl.envs.reasoning_gym.env import ReasoningGymEnv, dataset, require_package, score  # noqa: E402
from tracerl.envs.reasoning_gym.families import FAMILIES, calc, calc_expression, consistent  # noqa: E402
from tracerl.errors import UserError  # noqa: E402

SPEC = get_env("reasoning_gym")


def test_generation_is_deterministic_and_covers_the_families():
    a, b = generate("train", 40, seed=1), generate("train", 40, seed=1)
    assert [t.to_dict() for t in a] == [t.to_dict() for t in b]
    assert {t.metadata["family"] for t in a} == set(FAMILIES)


def test_heldout_is_disjoint_even_where_small_configs_repeat_questions():
    fams = ("basic_arithmetic", "chain_sum", "simple_equations")  # puzzle24 costs ~50 ms a problem
    train = generate("train", 150, seed=0, difficulty=0.0, families=fams)
    train += generate("train", 150, seed=1, difficulty=0.0, families=fams)
    held = generate("heldout", 40, seed=2, difficulty=0.0, families=fams)
    assert not {t.id for t in train} & {t.id for t in held}
    assert not {t.prompt for t in train if t.metadata["family"] == "chain_sum"} & {
        t.prompt for t in held if t.metadata["family"] == "chain_sum"}


def test_difficulty_knob_scales_the_problems():
    easy = generate("train", 15, difficulty=0.0, families=("chain_sum",))
    hard = generate("train", 15, difficulty=1.0, families=("chain_sum",))
    assert max(len(t.prompt.split()) for t in easy) < min(len(t.prompt.split()) for t in hard)


@functools.lru_cache(maxsize=1)
def _rate_tasks():
    tasks = generate("train", 150, seed=3, families=("basic_arithmetic", "chain_sum", "simple_equations"))
    return tasks + generate("train", 10, seed=3, families=("puzzle24",))


@pytest.mark.parametrize("error_rate", [0.0, 0.3])
def test_expert_succeeds_at_its_configured_rate(kit, error_rate):
    rate = kit.success_rate(SPEC, _rate_tasks(), seed=1, error_rate=error_rate)
    assert abs(rate - (1 - error_rate)) <= 0.1  # 160 episodes, sd about 0.036


def test_puzzle24_guard_closes_two_holes_in_the_package_scorer():
    task = generate("train", 1, seed=0, families=("puzzle24",))[0]
    entry, level = task.metadata["entry"], task.metadata["level"]
    nums = sorted(entry["metadata"]["numbers"])
    foreign = "(3+5)*(1+2)" if nums != [1, 2, 3, 5] else "(2+4)*(1+3)"
    # the package alone rewards an expression over other numbers...
    assert dataset("puzzle24", level).score_answer(answer=foreign, entry=entry) == 1.0
    # ...tracerl does not, and says why
    correct, raw = score("puzzle24", level, foreign, entry)
    assert correct == 0.0 and "numbers" in raw["guard"]
    assert score("puzzle24", level, task.answer, entry) == (1.0, {"package_score": 1.0})


def test_partial_package_scores_are_not_reward():
    task = generate("train", 1, seed=0, families=("basic_arithmetic",))[0]
    correct, raw = score("basic_arithmetic", task.metadata["level"], f"{task.answer}.0", task.metadata["entry"])
    assert correct == 0.0


def test_audit_cases_are_not_rewarded(kit):
    kit.check_audit(SPEC, audit_cases())


def test_invalid_action_then_answer(kit):
    task = generate("train", 1, seed=0)[0]
    steps, _ = kit.play(SPEC, task, ["the answer is 4", f"<answer>{task.answer}</answer>"])
    assert steps[0].info["invalid_action"] and not steps[0].terminated
    assert steps[1].terminal_reason == TerminalReason.EOS and steps[1].reward_components == {"correct": 1.0}


def test_scorer_crash_is_infra_failure():
    def crashing(*args):
        raise RuntimeError("scorer bug")

    task = generate("train", 1, seed=0)[0]
    env = ReasoningGymEnv(scorer=crashing)
    env.reset(task, 0)
    step = env.step("<answer>4</answer>")
    assert step.terminal_reason == TerminalReason.INFRA_FAILURE and step.reward_components == {}


def test_missing_package_is_one_clear_sentence(monkeypatch):
    real_import = builtins.__import__

    def no_rg(name, *args, **kwargs):
        if name == "reasoning_gym":
            raise ImportError("No module named 'reasoning_gym'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_rg)
    with pytest.raises(UserError, match=r"pip install 'tracerl\[reasoning\]'"):
        require_package()
    with pytest.raises(UserError, match="reasoning-gym package"):
        generate("train", 1)


def test_episode_replays_identically(kit):
    task = generate("train", 3, seed=0)[2]
    r1, r2 = (kit.run_expert(SPEC, task, random.Random(0)) for _ in range(2))
    assert r1[0] == r2[0] and r1[2] == r2[2]


def test_puzzle24_guard_rejects_values_that_int_truncates_to_24():
    entry = {"question": "", "answer": "", "metadata": {"numbers": [7, 7, 2, 1]}}
    assert dataset("puzzle24", 2).score_answer(answer="7*7/2*1", entry=entry) == 1.0  # 49/2 -> int 24
    correct, raw = score("puzzle24", 2, "7*7/2*1", entry)
    assert correct == 0.0 and raw["guard"] == "evaluates to 49/2, not exactly 24"


def test_calc_tool_returns_exact_values(kit):
    task = generate("train", 1, seed=0, families=("chain_sum",))[0]
    steps, _ = kit.play(SPEC, task, ["<calc>-66 * -56 + -93 * -20</calc>", "<calc>7/2</calc>", "<calc>(1 + 5) / 3</calc>"])
    assert [s.observation for s in steps] == ["<result> 5556</result>\n", "<result> 7/2</result>\n", "<result> 2</result>\n"]
    assert all(s.info["tool_status"] == "ok" and not s.terminated for s in steps)


def test_calc_division_by_zero_is_a_tool_error_not_an_invalid_action(kit):
    task = generate("train", 1, seed=0, families=("chain_sum",))[0]
    steps, _ = kit.play(SPEC, task, ["<calc>4 / (2 - 2)</calc>"])
    assert steps[0].observation == "<result> error: division by zero</result>\n"
    assert steps[0].info == {"tool": "calc", "tool_status": "error", "invalid_action": False}


@pytest.mark.parametrize("expr", ["__import__('os').getpid()", "2 ** 10", "1 +", "", "9" * 81, "x + 1"])
def test_calc_rejects_anything_but_arithmetic_as_invalid_actions(kit, expr):
    task = generate("train", 1, seed=0, families=("chain_sum",))[0]
    last = kit.ends_after_invalid(SPEC.make(), task, f"<calc>{expr}</calc>", 2)
    assert last.reward_components == {"correct": 0.0} and last.info["invalid_action"]


def test_calc_budget_then_invalid(kit):
    task = generate("train", 1, seed=0, families=("chain_sum",))[0]
    steps, _ = kit.play(SPEC, task, ["<calc>1 + 1</calc>"] * 4 + [f"<answer>{task.answer}</answer>"])
    assert [s.info["invalid_action"] for s in steps] == [False, False, False, True, False]
    assert steps[-1].reward_components == {"correct": 1.0}


@pytest.mark.parametrize("equation,variable,expr", [
    ("q + 4 = 12", "q", "12 - 4"), ("w - 8 = -7", "w", "-7 + 8"), ("7 - r = 5", "r", "7 - 5"),
    ("2 - 16*m = -94", "m", "(-94 - 2) / -16"), ("180*z = 1440", "z", "(1440 - 0) / 180"),
])
def test_expert_types_an_equations_solution_as_an_expression_of_its_numbers(equation, variable, expr):
    entry = {"metadata": {"equation": equation, "variable": variable}}
    assert calc_expression("simple_equations", entry) == expr


def test_generator_redraws_problems_whose_package_answer_is_wrong():
    # reasoning-gym 0.1.25 prints `9 - 2 * 2` without the parentheses it evaluated: answer 14
    bad = {"answer": "14", "metadata": {"expression": "9 - 2 * 2"}}
    assert not consistent("basic_arithmetic", bad)
    assert consistent("basic_arithmetic", {"answer": "5", "metadata": {"expression": "9 - 2 * 2"}})
    tasks = generate("train", 120, seed=7, difficulty=0.5, families=("basic_arithmetic",))
    assert all(calc(calc_expression("basic_arithmetic", t.metadata["entry"])) == t.answer for t in tasks)


def test_a_package_whose_answers_never_check_out_is_one_clear_sentence(monkeypatch):
    import tracerl.envs.reasoning_gym as rg_env

    monkeypatch.setattr(rg_env, "consistent", lambda family, entry: False)
    with pytest.raises(UserError, match="reference answer is not their exact value"):
        generate("train", 1, seed=0, families=("chain_sum",))
