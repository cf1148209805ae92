"""A simulated two-node Ray cluster (`ray.cluster_utils.Cluster`: two raylets on this machine, node A with the
custom resource `node_a`, node B with `node_b`): the `smoke` recipe's 2 RL steps with the 2 FSDP2 learner
ranks as Ray actors on node A (`placement.learner.resources`) and the rollout actors on node B
(`placement.rollout.resources`, `rollout.workers: 2` engines) and the KL reference on an actor of its own
on node B (`placement.reference`) end with the weights of the local single-process run (within 1e-5); the
manifest records the node each role ran on; the final checkpoint loads into a plain Hugging Face model."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

ray = pytest.importorskip("ray")

SMALL = ["run.threads=1", "stages=[sft,rl]", "rl.eval_every=0", "eval.tasks=4", "eval.samples=1", "eval.k=[1]",
         "run.progress=false"]


@pytest.fixture(scope="module")
def cluster():
    from ray.cluster_utils import Cluster

    if ray.is_initialized():
        ray.shutdown()
    # node A has a CPU to spare: only placement.rollout.resources keeps the rollout actors off it
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 3, "resources": {"node_a": 2},
                                                      "include_dashboard": False})
    c.add_node(num_cpus=3, resources={"node_b": 3})
    ray.init(address=c.address, logging_level="ERROR")
    try:
        yield c
    finally:
        ray.shutdown()
        c.shutdown()


def _node(resource: str) -> str:
    (node,) = [n["NodeID"] for n in ray.nodes() if n["Alive"] and resource in n["Resources"]]
    return node


@pytest.mark.timeout(600)
def test_two_nodes_learner_on_a_rollouts_on_b_match_one_process(cluster, tmp_path):
    from transformers import AutoModelForCausalLM

    from tracerl.api import train

    # each group sampled from its own generator: the same tokens on one in-process engine and on 2 engine actors
    local = train("smoke", *SMALL, "rollout.seeding=group", f"run.dir={tmp_path / 'local'}").run_dir
    two = train("smoke", *SMALL, f"run.dir={tmp_path / 'ray'}", "run.backend=ray", f"ray.address={cluster.address}",
                "learner.ranks=2", "placement.learner.resources={node_a: 1}", "rollout.workers=2",
                "placement.rollout.resources={node_b: 1}", "placement.reference.where=ray",
                "placement.reference.resources={node_b: 1}").run_dir
    for step in (1, 2):
        w1 = load_file(local / "checkpoints" / f"step_{step}" / "model.safetensors")
        w2 = load_file(two / "checkpoints" / f"step_{step}" / "model.safetensors")
        w0 = load_file(local / "checkpoints" / f"step_{step}" / "reference.safetensors")  # the SFT policy (KL reference)
        diff = max(float((w1[k] - w2[k]).abs().max()) for k in w1)
        moved = max(float((w1[k] - w0[k]).abs().max()) for k in w1 if k in w0)  # (tied embeddings: lm_head)
        assert moved > 3e-4 and diff < 1e-5, (step, moved, diff)  # RL moved the weights (measured 6.7e-4 at step 1) ≫ their difference (2.5e-6)

    placement = json.loads((two / "manifest.json").read_text())["placement"]
    a, b = _node("node_a"), _node("node_b")
    learner = placement["learner"]
    assert learner["where"] == "ray" and [w["rank"] for w in learner["workers"]] == [0, 1]
    assert {w["node_id"] for w in learner["workers"]} == {a}
    assert all(w["bundle"] == {"CPU": 1.0, "node_a": 1.0} for w in learner["workers"])
    rollout = placement["rollout"]
    assert rollout["where"] == "ray" and len(rollout["workers"]) == 2 and {w["node_id"] for w in rollout["workers"]} == {b}
    assert placement["trainer"]["node_id"] == a  # the driver joined through the head node
    reference = placement["reference"]  # the KL reference scored on an actor of its own, on node B
    assert reference["where"] == "ray" and [w["node_id"] for w in reference["workers"]] == [b]
    assert placement["critic"] == {"where": "trainer"}
    assert json.loads((local / "manifest.json").read_text())["placement"]["learner"]["where"] == "inprocess"

    # the sharded run's checkpoint is a plain Hugging Face model: full tensors gathered from the ranks
    hf = AutoModelForCausalLM.from_pretrained(two / "checkpoints" / "step_2")
    sd = hf.state_dict()
    assert max(float((sd[k] - w2[k]).abs().max()) for k in w2) == 0.0
    ids = torch.tensor([[3, 4, 5]])
    assert torch.isfinite(hf(input_ids=ids).logits).all()


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_critic_trains_on_node_b_as_in_one_process(cluster, tmp_path):
    """`placement.critic` with `{node_b: 1}`: ppo's critic (its weights, AdamW state, forward, loss and steps) on an
    actor on node B; the 2 RL steps end where the 1-process run ends, and the manifest names node B."""
    from tracerl.api import train

    ppo = [*SMALL, "rl.algorithm.name=ppo"]
    local = train("smoke", *ppo, f"run.dir={tmp_path / 'local'}").run_dir
    two = train("smoke", *ppo, f"run.dir={tmp_path / 'ray'}", "run.backend=ray", f"ray.address={cluster.address}",
                "placement.critic.where=ray", "placement.critic.resources={node_b: 1}").run_dir
    w1, w2 = (load_file(r / "checkpoints" / "step_2" / "model.safetensors") for r in (local, two))
    assert max(float((w1[k] - w2[k]).abs().max()) for k in w1) < 1e-6
    critic = json.loads((two / "manifest.json").read_text())["placement"]["critic"]
    assert critic["where"] == "ray" and [w["node_id"] for w in critic["workers"]] == [_node("node_b")]
    assert critic["workers"][0]["bundle"] == {"CPU": 1.0, "node_b": 1.0}
