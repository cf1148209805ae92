"""`learner.checkpoint_format: sharded` (train/shards.py): two gloo ranks each write their shard of the policy's
weights and AdamW moments into a checkpoint (no optimizer gathered to rank 0), and the 3rd update taken from it
equals the uninterrupted 3rd update within 1e-5 on 2 ranks, in one process (2 → 1, DCP resharding) and across
an RL stage boundary in one process; the checkpoint folder loads with plain `AutoModelForCausalLM` and gives
the run's logits."""

from __future__ import annotations

import copy
import json

import pytest
import torch

from tracerl.algorithms.spec import ALGORITHMS, StepContext

from test_fsdp_learner import _batch, max_diff, run_controller, tiny_model


class _NoTokenizer:
    def save_pretrained(self, path):
        pass


def _step(algo, roles, batch, step: int):
    from tracerl.train.update import rl_update

    torch.manual_seed(step)
    rl_update(algo, roles, batch, batch.reward_B, minibatches=2, ctx=StepContext(max_tokens=64, step=step))
    roles.policy.scheduler.step()


def _cases(folder: str):
    from pathlib import Path

    from transformers import AutoModelForCausalLM

    from tracerl.train.checkpoint import MANIFEST, load_trainer_state, save_checkpoint
    from tracerl.train.fsdp_group import ShardedPolicyRole
    from tracerl.train.roles import PolicyRole, Roles

    model, batch, folder = tiny_model(), _batch(), Path(folder)
    algo = ALGORITHMS["grpo"](aggregation="token")
    # a cosine schedule over 6 steps: the resumed lr must be the saved one, not the schedule's start
    kw = dict(lr=3e-3, max_grad_norm=0.05, sampling={"temperature": 1.0, "top_p": 1.0, "top_k": 0},
              schedule={"kind": "cosine", "steps": 6, "min_ratio": 0.1})
    sharded = ShardedPolicyRole(copy.deepcopy(model), **kw, ranks=2, threads=1, checkpoint_format="sharded")
    roles = Roles(sharded)
    for step in range(2):
        _step(algo, roles, batch, step)
    small = sharded.state_dict()  # what RLState.roles_state holds after every step: no moments
    after2 = copy.deepcopy(sharded.model)
    save_checkpoint(folder, after2, _NoTokenizer(), state={"stage": "rl", "step": 2, "roles_state": {"policy": small}},
                    shards=sharded.write_shards)
    _step(algo, roles, batch, 2)  # the uninterrupted 3rd update
    straight = {k: v.clone() for k, v in sharded.model.state_dict().items()}
    res = {"small": sorted(small), "moved": max_diff(straight, after2.state_dict()),
           "manifest": json.loads((folder / MANIFEST).read_text())["policy_state"],
           "shards": sorted(p.name for p in (folder / "policy_shards").iterdir())}
    saved = load_trainer_state(folder)["roles_state"]["policy"]  # verified, the shard folder attached
    res["path"] = saved["sharded"]["path"]

    two = Roles(ShardedPolicyRole(copy.deepcopy(after2), **kw, state=saved, ranks=2, threads=1,
                                  checkpoint_format="sharded"))
    _step(algo, two, batch, 2)
    res["2->2"] = max_diff(straight, two.policy.model.state_dict())
    # a later RL stage of this process gets the small state (no shard folder): the ranks keep their moments
    nxt = Roles(ShardedPolicyRole(copy.deepcopy(two.policy.model), **kw, state=two.policy.state_dict(), ranks=2,
                                  threads=1, checkpoint_format="sharded"))
    one = Roles(PolicyRole(copy.deepcopy(after2), **kw, state=copy.deepcopy(saved)))  # 2 -> 1
    _step(algo, one, batch, 2)
    res["2->1"] = max_diff(straight, one.policy.model.state_dict())
    fresh = Roles(PolicyRole(copy.deepcopy(after2), **kw))  # without the moments: a different 3rd update
    _step(algo, fresh, batch, 2)
    res["fresh"] = max_diff(straight, fresh.policy.model.state_dict())
    _step(algo, one, batch, 3)  # the stage handoff: the 4th update on the ranks' own moments equals 1-process's
    _step(algo, nxt, batch, 3)
    res["handoff"] = max_diff(one.policy.model.state_dict(), nxt.policy.model.state_dict())

    hf = AutoModelForCausalLM.from_pretrained(folder).eval()  # a plain Hugging Face load of the checkpoint
    ids = batch.ids_BT[:3]
    with torch.no_grad():
        res["logits"] = float((hf(ids).logits - after2.eval()(ids).logits).abs().max())
    return res


@pytest.mark.timeout(600)  # ~20 s of wall time on an idle 2-core machine
def test_sharded_checkpoint_resumes_on_two_ranks_and_one(tmp_path):
    res = run_controller(_cases, str(tmp_path / "step_2"))
    assert res["small"] == ["param_groups", "scheduler", "sharded"]  # the moments never reach rank 0's state
    assert res["manifest"] == {"format": "sharded", "world": 2, "dir": "policy_shards", "storage": "dcp-safetensors"}
    assert res["shards"] == ["shard-00001-model-00001-of-00001.safetensors",
                             "shard-00002-model-00001-of-00001.safetensors"]  # one file per rank, no pickle
    assert res["path"] == str(tmp_path / "step_2" / "policy_shards")
    assert res["moved"] > 1e-3  # the 3rd update moves the weights far more than the tolerance below
    assert res["2->2"] < 1e-5 and res["2->1"] < 1e-5 and res["handoff"] < 1e-5, res
    assert res["fresh"] > 1e-4  # the restored moments matter: resuming without them is a different update
    assert res["logits"] < 1e-5


def test_sharded_needs_ranks():
    from tracerl.config import load_recipe
    from tracerl.errors import UserError

    assert load_recipe("smoke", ["learner.ranks=2", "learner.checkpoint_format=sharded"]).learner.checkpoint_format \
        == "sharded"
    with pytest.raises((UserError, ValueError), match="checkpoint_format: sharded needs learner.ranks above 1"):
        load_recipe("smoke", ["learner.checkpoint_format=sharded"])


def test_a_sharded_state_without_its_shards_is_one_sentence(tmp_path):
    from tracerl.errors import UserError
    from tracerl.train.checkpoint import load_trainer_state, save_checkpoint

    policy = {"sharded": {"world": 2}, "scheduler": {}, "param_groups": []}
    save_checkpoint(tmp_path / "step_1", tiny_model(), _NoTokenizer(),
                    state={"stage": "rl", "step": 1, "roles_state": {"policy": policy}})  # no shards= writer
    with pytest.raises(UserError, match="written by a sharded learner but has no policy_shards/ folder"):
        load_trainer_state(tmp_path / "step_1")
