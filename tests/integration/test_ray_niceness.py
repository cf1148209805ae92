"""The local Ray runtime a run starts must not deprioritise its rollout actor: Ray starts workers
at nice 15 by default, which starved the actor on a busy machine (rollouts several times slower)."""

import os

import pytest

ray = pytest.importorskip("ray")


@pytest.mark.slow
def test_the_run_s_local_runtime_starts_actors_at_the_driver_s_niceness():
    from tracerl.config.ray import RayConfig
    from tracerl.rollout.ray_backend import ray_runtime

    if ray.is_initialized():
        pytest.skip("a runtime is already up in this process")

    @ray.remote(num_cpus=1)
    class Probe:
        def nice(self):
            return os.nice(0)

    with ray_runtime(RayConfig()):
        actor = Probe.remote()
        assert ray.get(actor.nice.remote()) == os.nice(0)
