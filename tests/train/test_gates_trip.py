"""Every gate the trainer feeds can trip: ESS from each update, the verifier audit replayed in training;
and the agent loop ends an episode on the policy's own EOS before any room check."""

import copy

import pytest
import torch

from tracerl.config import load_recipe
from tracerl.contract import TerminalReason
from tracerl.envs import Step
from tracerl.errors import UserError
from tracerl.rollout import LoopBudgets, TorchEngine, run_episodes
from tracerl.rollout.engine import Sample
from tracerl.store import Store
from tracerl.tasks import UniformSampler
from tracerl.telemetry import GateTripped
from tracerl.run.rl_loop import train_rl
from tracerl.verifiers.audit import register_audit
from tracerl.verifiers.base import AuditCase, VerifierResult


def _train(tiny, spec, tmp_path, *overrides, saved=None):
    model, tok = tiny
    model = copy.deepcopy(model)
    recipe = load_recipe("smoke", ["rl.steps=2", "rl.prompts_per_step=2", "rl.group_size=4", "env.max_new_tokens=6",
                                   "rl.truncation=keep", "rl.checkpoint_every=0", "rl.algorithm.kl.coef=0", *overrides])
    saved = [] if saved is None else saved
    with Store(tmp_path / "s.sqlite") as store:
        train_rl(model, tok, TorchEngine(model, tok), UniformSampler(spec.generate("train", 16, 0), seed=3), recipe,
                 spec=spec, log=lambda m, s: None, on_eval=None, on_checkpoint=lambda s, st: saved.append(s),
                 store=store, tokenizer_hashes={}, progress=False)
    return saved


def test_ess_gate_trips(tiny, parity_env, tmp_path):
    # the ESS fraction is at most 1, so a floor above 1 trips at the first step with a checkpoint
    saved = []
    with pytest.raises(GateTripped) as trip:
        _train(tiny, parity_env, tmp_path, "gates.ess_frac_floor=1.01", saved=saved)
    assert trip.value.trip.gate == "ess_frac_floor" and trip.value.trip.step == 1 and trip.value.trip.value <= 1.0
    assert saved == [1]  # state checkpointed at the tripping step before the exception


class _AcceptsEverything:
    name, revision, primary = "parity_audit", "1", "correct"

    def verify(self, task, trajectory):
        return VerifierResult({"correct": 1.0}, {"reason": "accepts anything"})


def test_audit_gate_trips_when_the_verifier_accepts_an_attack(tiny, parity_env, tmp_path):
    cases = [AuditCase("empty answer", {"answer": "4"}, "", should_reward=False, attack="answers nothing")]
    register_audit("parity", lambda: (_AcceptsEverything(), cases), replace=True)
    with pytest.raises(GateTripped) as trip:
        _train(tiny, parity_env, tmp_path, "gates.audit_failures_max=0", "gates.audit_every=2")
    assert trip.value.trip.gate == "audit_failures_max" and trip.value.trip.step == 2 and trip.value.trip.value == 1.0


def test_audit_gate_on_an_env_without_an_audit_set_is_refused(tiny, tmp_path):
    from tracerl.envs import get_env
    from tracerl.envs.base import EnvSpec

    base = get_env("math_tool")
    spec = EnvSpec(name="no_audit_env", revision="1", make=base.make, generate=base.generate, expert=base.expert,
                   reward_weights=base.reward_weights, stop_strings=base.stop_strings, special_tokens=base.special_tokens)
    with pytest.raises(UserError, match="has no audit set"):
        _train(tiny, spec, tmp_path, "gates.audit_failures_max=0")


class _EOSEngine(TorchEngine):
    """Samples 'x' then the tokenizer's EOS, wherever the episode is."""

    def generate(self, prompts, **kw):
        ids = self.tokenizer("x", add_special_tokens=False)["input_ids"] + [self.tokenizer.eos_token_id]
        return [Sample(list(ids), [-0.5] * len(ids), "stop") for _ in prompts]


class _LongObservationEnv:
    name, revision = "long_obs", "1"

    def reset(self, task, seed):
        return [{"role": "user", "content": "go"}]

    def step(self, action_text):  # never terminates; answers with more text than the budget has room for
        return Step(observation="<output>" + "y " * 200 + "</output>", info={"invalid_action": True})

    def state_hash(self):
        return "s"


def test_policy_eos_ends_the_episode_before_the_room_check(tiny, parity_env):
    from tracerl.envs.base import EnvSpec

    model, tok = tiny
    spec = EnvSpec(name="long_obs", revision="1", make=_LongObservationEnv, generate=parity_env.generate,
                   expert=parity_env.expert, reward_weights={"correct": 1.0}, stop_strings=(),
                   special_tokens=parity_env.special_tokens)
    (traj,) = run_episodes(_EOSEngine(model, tok), spec, parity_env.generate("train", 1, 0), ["g"],
                           budgets=LoopBudgets(3, 64, 8), sampling={"temperature": 1.0, "top_p": 1.0, "top_k": 0},
                           policy_version=0, seed=0, generator=torch.Generator().manual_seed(0))
    assert traj.terminal_reason == TerminalReason.EOS and not traj.truncated


def test_probe_gate_trips(tiny, parity_env, tmp_path):
    # the engine shares the learner's weights, so |engine - learner| is tiny but >= 0: a limit of -1 trips at step 1
    with pytest.raises(GateTripped) as trip:
        _train(tiny, parity_env, tmp_path, "gates.probe_logprob_diff_max=-1")
    assert trip.value.trip.gate == "probe_logprob_diff_max" and trip.value.trip.step == 1
    assert 0.0 <= trip.value.trip.value < 1e-3  # in process, the engine and the learner agree to float precision


class _HangsOnce:
    """The first episode's step hangs far past the recipe's step timeout; the others answer at once."""

    name, revision, calls = "hangs_once", "1", 0

    def reset(self, task, seed):
        return [{"role": "user", "content": "go"}]

    def step(self, action_text):
        import time

        _HangsOnce.calls += 1
        if _HangsOnce.calls == 1:
            time.sleep(3.0)
        return Step(terminated=True, terminal_reason=TerminalReason.EOS, reward_components={"correct": 1.0})

    def state_hash(self):
        return "s"


def test_env_step_timeout_from_the_recipe_reaches_the_agent_loop(tiny, parity_env, tmp_path):
    from tracerl.envs.base import EnvSpec

    spec = EnvSpec(name="hangs_once", revision="1", make=_HangsOnce, generate=parity_env.generate,
                   expert=parity_env.expert, reward_weights={"correct": 1.0}, stop_strings=(),
                   special_tokens=parity_env.special_tokens)
    _HangsOnce.calls = 0
    model, tok = tiny
    recipe = load_recipe("smoke", ["rl.steps=1", "rl.prompts_per_step=1", "rl.group_size=4", "env.max_new_tokens=4",
                                   "rl.checkpoint_every=0", "rl.algorithm.kl.coef=0", "env.step_timeout_s=0.5"])
    with Store(tmp_path / "s.sqlite") as store:
        train_rl(copy.deepcopy(model), tok, TorchEngine(model, tok), UniformSampler(spec.generate("train", 4, 0), seed=3),
                 recipe, spec=spec, log=lambda m, s: None, on_eval=None, on_checkpoint=lambda s, st: None,
                 store=store, tokenizer_hashes={}, progress=False)
        reasons = sorted(t.terminal_reason.value for t in store.trajectories(stage="rl"))
    assert reasons == ["eos", "eos", "eos", "infra_failure"]
