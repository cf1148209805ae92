"""`engine.threads`: the torch engine's forwards (prefill and decode, fast session and reference loop) run with
that many intra-op threads, the process's count is restored after, and the setting reaches rollout workers."""

import torch

from tracerl.models.device import intra_op_threads
from tracerl.rollout import TorchEngine


def _seen_threads(model) -> list[int]:
    seen = []  # on the head: every forward reaches it, the HF one and the lean decode step (lean_decode.py) alike
    model.lm_head.register_forward_pre_hook(lambda module, args: seen.append(torch.get_num_threads()))
    return seen


def test_the_engine_samples_with_its_own_thread_count_and_restores_the_process_count(tiny):
    import copy

    model, tok = tiny
    model = copy.deepcopy(model)
    seen = _seen_threads(model)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        engine = TorchEngine(model, tok, threads=1)
        prompts = [[5, 6, 7]] * 3
        engine.generate(prompts, max_new_tokens=4, generator=torch.Generator().manual_seed(0))
        engine.generate_reference(prompts, max_new_tokens=4, generator=torch.Generator().manual_seed(0))
        engine.open_session().generate([0, 1], [[5, 6], [7, 8]], max_new_tokens=3)
        assert len(seen) > 6 and set(seen) == {1}  # every forward: prefill and each decode step
        assert torch.get_num_threads() == 2  # the learner's count is back
        seen.clear()
        TorchEngine(model, tok).generate(prompts, max_new_tokens=2)  # unset: the process's count
        assert set(seen) == {2}
    finally:
        torch.set_num_threads(before)


def test_intra_op_threads_restores_after_an_error():
    before = torch.get_num_threads()
    target = 1 if before != 1 else 2
    try:
        with intra_op_threads(target):
            assert torch.get_num_threads() == target
            raise RuntimeError("boom")
    except RuntimeError:
        pass
    assert torch.get_num_threads() == before
    with intra_op_threads(None):
        assert torch.get_num_threads() == before


def test_the_setting_reaches_a_rollout_worker_engine(tiny):
    from tracerl.config import load_recipe
    from tracerl.rollout.engines import build_engine
    from tracerl.rollout.workers import worker_engine, worker_settings

    model, tok = tiny
    recipe = load_recipe("smoke", ["engine.threads=1"])
    assert build_engine(recipe.engine, model, tok).threads == 1
    settings = worker_settings(model, tok, recipe, None, {}, seed=0, partial=True, threads=2)
    assert settings.engine_threads == 1
    assert worker_engine(settings, model, tok).threads == 1
    assert build_engine(load_recipe("smoke").engine, model, tok).threads is None
