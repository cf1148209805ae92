import random

import pytest

from tracerl.contract.roles import TerminalReason
from tracerl.envs import get_env
from tracerl.envs.search_qa import audit_cases, generate, make_expert
from tracerl.envs.search_qa.env import MAX_INVALID, SEARCH_BUDGET, SearchQAEnv, bm25_retriever
from tracerl.envs.search_qa.kb import normalize, passages
from tracerl.errors import UserError

SPEC = get_env("search_qa")


def test_registered_spec_is_consistent():
    assert SPEC.name == "search_qa" and SPEC.make().name == "search_qa"
    assert set(SPEC.stop_strings) <= set(SPEC.special_tokens)


def test_generation_is_deterministic_and_episodes_replay(kit):
    a, b = generate("train", 20, seed=3), generate("train", 20, seed=3)
    assert [t.to_dict() for t in a] == [t.to_dict() for t in b]
    runs = [kit.run_expert(SPEC, a[5], random.Random(1)) for _ in range(2)]
    assert [s.observation for s in runs[0][1]] == [s.observation for s in runs[1][1]]
    assert runs[0][2] == runs[1][2]  # state hashes


def test_heldout_is_disjoint_from_train_across_seeds():
    train = {t.id for s in range(3) for t in generate("train", 150, seed=s)}
    held = generate("heldout", 100, seed=0)
    assert all(t.split == "heldout" for t in held)
    assert not train & {t.id for t in held}
    # the split depends on content only: the same question asked from any seed lands in one split
    assert len({t.id for t in held}) == 100


def test_difficulty_maps_to_hops_and_rejects_out_of_range():
    assert {t.metadata["hops"] for t in generate("train", 20, difficulty=0.0)} == {1}
    assert {t.metadata["hops"] for t in generate("train", 20, difficulty=1.0)} == {2}
    with pytest.raises(UserError, match="out of range"):
        generate("train", 1, difficulty=1.5)


def test_bm25_ranks_the_queried_entity_first_and_the_expert_reads_its_answer(kit):
    rng = random.Random(0)
    for task in generate("train", 60, seed=1):
        _, steps, _ = kit.run_expert(SPEC, task, rng, error_rate=0.0)
        observations = " ".join(s.observation or "" for s in steps)
        assert task.answer in observations  # the answer was retrieved, not known
        assert kit.succeeded(SPEC, steps[-1])
        assert sum(s.info.get("tool") == "search" for s in steps) == task.metadata["hops"]


@pytest.mark.parametrize("error_rate", [0.0, 0.3])
def test_expert_succeeds_at_its_configured_rate(kit, error_rate):
    # the error mode (answer at once, a wrong entity) always fails, so success = 1 - error_rate;
    # 300 episodes: binomial sd <= 0.027, tolerance 0.08 (about 3 sd)
    rate = kit.success_rate(SPEC, generate("train", 300, seed=2), seed=4, error_rate=error_rate)
    assert abs(rate - (1 - error_rate)) <= 0.08


def test_audit_cases_are_not_rewarded(kit):
    kit.check_audit(SPEC, audit_cases())


def test_normalized_exact_match():
    assert normalize(" The  Kebuton. ") == "kebuton"
    assert normalize("kebuton or nazoton") != "kebuton"


def test_invalid_actions_consume_a_turn_and_are_counted():
    task = generate("train", 1, seed=0)[0]
    env = SearchQAEnv(max_invalid=None)
    env.reset(task, 0)
    for bad in ["kebuton", "<search>a</answer>", "<find>x</find>", "<search></search>", "<answer>x <b></b></answer>"]:
        step = env.step(bad)
        assert not step.terminated and step.info["invalid_action"] is True
        assert step.observation.startswith("<error>invalid_action")


def test_the_max_invalid_th_invalid_action_ends_the_episode_as_a_failure(kit):
    task = generate("train", 1, seed=0)[0]
    last = kit.ends_after_invalid(SearchQAEnv(), task, "kebuton", MAX_INVALID)
    assert last.reward_components == {"correct": 0.0, "invalid_actions": float(MAX_INVALID)}


def test_search_budget():
    task = generate("train", 1, seed=0)[0]
    env = SearchQAEnv()
    env.reset(task, 0)
    for _ in range(SEARCH_BUDGET):
        assert env.step("<search>x</search>").observation.startswith("<result>")
    step = env.step("<search>x</search>")
    assert step.info["invalid_action"] and "budget" in step.observation and not step.terminated
    assert env.step(f"<answer>{task.answer}</answer>").reward_components == {"correct": 1.0, "invalid_actions": 1.0}


def test_index_failure_is_infra_failure_not_reward():
    def broken(docs):
        def search(query, k):
            raise OSError("index shard unavailable")
        return search

    task = generate("train", 1, seed=0)[0]
    env = SearchQAEnv(retriever=broken)
    env.reset(task, 0)
    step = env.step("<search>anything</search>")
    assert step.terminated and step.terminal_reason == TerminalReason.INFRA_FAILURE
    assert step.reward_components == {} and "index shard" in step.info["infra_error"]


def test_retriever_returns_top_k_by_bm25():
    task = generate("train", 1, seed=0, difficulty=1.0)[0]
    docs = passages(task.metadata["kb"])
    person = task.metadata["queries"][0].split()[0]
    hits = bm25_retriever(docs)(f"{person} works", 2)
    assert len(hits) == 2 and hits[0].startswith(f"{person} was born")


def test_expert_factory_default_rate():
    task = generate("train", 1, seed=0)[0]
    always_wrong = make_expert(1.0)(task, [], random.Random(0))
    assert always_wrong.startswith("<answer>") and task.answer not in always_wrong
