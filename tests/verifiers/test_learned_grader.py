"""The learned grader: verdicts from the judge's own yes/no probabilities, hashes, and calibration counts."""

import math

import pytest
import torch

from tracerl.contract import TokenRole, Trajectory
from tracerl.config.roles import GraderConfig
from tracerl.train.grading import GraderRole
from tracerl.verifiers.calibration import calibration
from tracerl.verifiers.learned_grader import DEFAULT_PROMPT, LearnedGrader


def test_calibration_counts_worked_by_hand():
    # (deterministic, judge): one TP, one FN, one FP, two TN
    c = calibration([(True, True), (True, False), (False, True), (False, False), (False, False)])
    assert (c["tp"], c["fn"], c["fp"], c["tn"]) == (1, 1, 1, 2)
    assert c["agreement"] == pytest.approx(3 / 5)
    assert c["false_positive_rate"] == pytest.approx(1 / 3)  # FP / (FP + TN)
    assert c["false_negative_rate"] == pytest.approx(1 / 2)  # FN / (FN + TP)
    assert c["judge_accept_rate"] == pytest.approx(2 / 5) and c["verifier_accept_rate"] == pytest.approx(2 / 5)
    assert math.isnan(calibration([(False, False)])["false_negative_rate"])  # no positives: undefined, not 0


def test_p_yes_is_the_judges_next_token_share_and_batching_changes_nothing(tiny):
    model, tok = tiny
    g = LearnedGrader(model, tok, batch_size=8)
    pairs = [("What is 2 + 3?", "<answer>5</answer>"), ("What is 7 * 6?", "a much longer answer " * 6)]
    batched = g.grade(pairs)
    for (q, r), v in zip(pairs, batched):
        ids, _ = g._prompt_ids(q, r)
        with torch.no_grad():
            logp = torch.log_softmax(model(input_ids=torch.tensor([ids])).logits[0, -1].float(), -1)
        y, n = torch.logsumexp(logp[g.yes_ids], 0).exp(), torch.logsumexp(logp[g.no_ids], 0).exp()
        assert v.p_yes == pytest.approx(float(y / (y + n)), abs=1e-5)  # right padding: last real token unaffected
        assert v.accept == (v.p_yes >= 0.5)
    assert g.grade(pairs[:1])[0].p_yes == pytest.approx(batched[0].p_yes, abs=1e-5)


def test_revision_names_the_prompt_and_the_weights(tiny):
    model, tok = tiny
    a = LearnedGrader(model, tok)
    b = LearnedGrader(model, tok, prompt=DEFAULT_PROMPT + " Think.")
    assert a.prompt_sha256 != b.prompt_sha256 and a.revision != b.revision
    assert a.manifest()["model_sha256"] == LearnedGrader(model, tok).model_sha256
    with pytest.raises(ValueError, match="question"):
        LearnedGrader(model, tok, prompt="Is {response} right?")


class _Keyword(torch.nn.Module):
    """A judge that says yes exactly when the prompt holds token `key` (so verdicts are known in advance)."""

    def __init__(self, key, yes, no, vocab):
        super().__init__()
        self.key, self.yes, self.no, self.vocab = key, yes, no, vocab
        self.w = torch.nn.Parameter(torch.zeros(1))

    def forward(self, input_ids, attention_mask=None):
        B, T = input_ids.shape
        logits = torch.zeros(B, T, self.vocab)
        has = ((input_ids == self.key) & (attention_mask.bool() if attention_mask is not None else True)).any(1)
        logits[:, :, self.yes] = torch.where(has, 5.0, -5.0)[:, None]
        logits[:, :, self.no] = torch.where(has, -5.0, 5.0)[:, None]
        return type("Out", (), {"logits": logits})()


def _traj(tok, i, answer, correct):
    t = Trajectory(trajectory_id=f"t{i}", group_id="g", task_id=f"k{i}", env_name="math_tool")
    t.append(tok.encode("What is 2 + 3?", add_special_tokens=False), TokenRole.PROMPT)
    ids = tok.encode(f"<answer>{answer}</answer>", add_special_tokens=False)
    t.append(ids, TokenRole.ACTION, logprobs=[-0.5] * len(ids), policy_version=0)
    t.set_reward({"correct": float(correct), "format": 1.0}, {"correct": 1.0, "format": 0.0})
    from tracerl.contract.roles import TerminalReason

    t.finish(TerminalReason.EOS)
    return t


def _role(tok, mode):
    yes = tok.encode("yes", add_special_tokens=False)[0]
    no = tok.encode("no", add_special_tokens=False)[0]
    key = tok.encode("7", add_special_tokens=False)[0]  # the judge accepts any response containing a 7
    judge = LearnedGrader(_Keyword(key, yes, no, len(tok)), tok, model_revision="stub")
    return GraderRole(GraderConfig(path="unused", mode=mode, weight=2.0), judge)


def test_replace_mode_trains_on_the_judge_and_names_it(tiny):
    _, tok = tiny
    from tracerl.contract.task import Task

    tasks = [Task(id=f"k{i}", source="s", prompt="What is 2 + 3?", answer=5) for i in range(3)]
    # answers 5 (correct, judge no), 7 (wrong, judge yes: a false positive), 57 (wrong, judge yes)
    trajs = [_traj(tok, 0, 5, True), _traj(tok, 1, 7, False), _traj(tok, 2, 57, False)]
    role = _role(tok, "replace")
    role.apply(trajs, tasks, tok)
    assert [t.reward for t in trajs] == [0.0, 2.0, 2.0]  # weight 2 x judge
    assert all(t.verifier_name == "learned_grader" and t.verifier_revision == role.grader.revision for t in trajs)
    assert [t.reward_components["correct"] for t in trajs] == [1.0, 0.0, 0.0]  # the env's verdict stays recorded
    assert all(t.reward_weights["correct"] == 0.0 and "judge_p_yes" in t.verifier_output for t in trajs)
    for t in trajs:  # the contract's reward rule: reward = sum of weight x component
        assert t.reward == sum(t.reward_weights[k] * v for k, v in t.reward_components.items())
    m = role.metrics()
    assert m["grader/agreement"] == 0.0 and m["grader/false_positive_rate"] == 1.0
    assert m["grader/false_negative_rate"] == 1.0 and m["grader/n"] == 3
    assert role.metrics() == {}  # reset after each step


def test_calibrate_mode_keeps_the_reward(tiny):
    _, tok = tiny
    from tracerl.contract.task import Task

    tasks = [Task(id=f"k{i}", source="s", prompt="q", answer=7) for i in range(2)]
    trajs = [_traj(tok, 0, 7, True), _traj(tok, 1, 3, False)]
    role = _role(tok, "calibrate")
    role.apply(trajs, tasks, tok)
    assert [t.reward for t in trajs] == [1.0, 0.0]
    assert all(t.verifier_name == "" and t.reward_weights["judge"] == 0.0 for t in trajs)
    assert role.metrics()["grader/agreement"] == 1.0
