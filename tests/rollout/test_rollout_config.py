"""The `rollout:` section (config/rollout.py): what it accepts, what it refuses in one sentence, and the
resolved seeding."""

import pytest
import yaml

from tracerl.config import load_recipe
from tracerl.errors import UserError


@pytest.mark.parametrize("overrides, seeded", [([], False), (["rollout.workers=2"], True),
                                               (["rollout.seeding=group"], True),
                                               (["rl.mode=async", "rollout.workers=2"], True),
                                               (["run.backend=ray", "rollout.workers=2"], True)])
def test_workers_and_seeding_resolve(overrides, seeded):
    assert load_recipe("smoke", overrides).rollout.group_seeded is seeded


@pytest.mark.parametrize("overrides, words", [
    (["rollout.workers=2", "rollout.seeding=step"], "cannot share"),
    (["rl.rollout_workers=2"], "did you mean 'rollout.workers'"),
    (["rollout.threads=2"], "plays in the trainer's process"),
    # async, group jobs: at most (η + 1) × prompts_per_step = 1 × 2 jobs run at once
    (["rl.mode=async", "rl.max_staleness=0", "rl.prompts_per_step=2", "rollout.workers=3"], "2 group-sized jobs"),
    # async, step jobs (one worker's seeding kept): at most η + 1 = 1
    (["rl.mode=async", "rl.max_staleness=0", "rollout.workers=1", "rollout.seeding=step"], None),
    (["rollout.workers=2", "gateway.agent=examples/gateway_agent/agent.py:run"], None),  # the gateway fronts 2 engines
    (["rollout.workers=2", "rollout.weight_sync=broadcast", "gateway.agent=examples/gateway_agent/agent.py:run"],
     "gateway.agent does not combine with rollout.weight_sync: broadcast"),
    (["rollout.workers=2", "rollout.sync_bucket_mb=8", "gateway.agent=examples/gateway_agent/agent.py:run"],
     "gateway.agent does not combine with rollout.sync_bucket_mb"),
    (["run.backend=ray", "rollout.workers=3"], "ray.num_cpus"),  # 3 actors × 1 CPU on a 2-CPU local runtime
])
def test_refusals_are_one_sentence(overrides, words):
    if words is None:
        load_recipe("smoke", overrides)
        return
    with pytest.raises(UserError, match=words.replace("(", r"\(")):
        load_recipe("smoke", overrides)


def test_a_config_written_before_rollout_workers_still_loads(tmp_path):
    """A resolved config.yaml of an earlier run holds rl.rollout_workers: 1 (its default then): it loads; any other
    value names the new key."""
    cfg = load_recipe("smoke").model_dump(mode="json")
    del cfg["rollout"]
    cfg["rl"]["rollout_workers"] = 1
    (tmp_path / "old.yaml").write_text(yaml.safe_dump(cfg))
    assert load_recipe(str(tmp_path / "old.yaml")).rollout.workers == 1
    cfg["rl"]["rollout_workers"] = 3
    (tmp_path / "old3.yaml").write_text(yaml.safe_dump(cfg))
    with pytest.raises(UserError, match="rl.rollout_workers is now rollout.workers; set rollout.workers=3"):
        load_recipe(str(tmp_path / "old3.yaml"))
