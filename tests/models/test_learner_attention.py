"""model.attention: the learner-side model's attention implementation, with rollout copies keeping the
architecture's own (eager in bf16 is faster for the learner on a CPU, sdpa decodes faster)."""

import copy

import torch

from tracerl.models.precision import set_autocast, set_learner_attention
from tracerl.models.weights import engine_copy, plain_architecture


def _attn(m):
    return m.config._attn_implementation


def test_auto_is_eager_for_a_bf16_learner_on_cpu_and_rollout_copies_keep_sdpa(tiny):
    model, _ = tiny
    fp32 = copy.deepcopy(model)
    assert _attn(fp32) == "sdpa" and set_learner_attention(fp32, "auto") is None and _attn(fp32) == "sdpa"
    learner = set_autocast(copy.deepcopy(model), "bf16")
    assert set_learner_attention(learner, "auto") == "eager" and _attn(learner) == "eager"
    _, config = plain_architecture(learner)
    assert config._attn_implementation == "sdpa" and config is not learner.config
    assert _attn(engine_copy(learner, "bfloat16")) == "sdpa"
    assert set_learner_attention(learner, "auto") is None  # already eager: nothing changes


def test_named_implementation_is_set_and_scores_match(tiny):
    model, _ = tiny
    ids = torch.randint(3, 100, (2, 12))
    with torch.no_grad():
        ref = model(input_ids=ids).logits
    eager = copy.deepcopy(model)
    assert set_learner_attention(eager, "eager") == "eager" and _attn(eager) == "eager"
    with torch.no_grad():
        torch.testing.assert_close(eager(input_ids=ids).logits, ref, rtol=1e-5, atol=1e-5)
    assert plain_architecture(eager)[1]._attn_implementation == "sdpa"
    assert set_learner_attention(eager, "sdpa") == "sdpa" and _attn(eager) == "sdpa"


def test_recipe_key_reaches_the_policy(tiny):
    from tracerl.config import load_recipe
    from tracerl.train.model_setup import place_policy

    model, _ = tiny
    recipe = load_recipe("smoke", ["model.attention=eager", "model.device=cpu"])
    assert _attn(place_policy(copy.deepcopy(model), recipe)) == "eager"
    recipe = load_recipe("smoke", ["model.device=cpu"])
    assert _attn(place_policy(copy.deepcopy(model), recipe)) == "sdpa"
