"""The lean decode step (rollout/lean_decode.py) computes the Hugging Face forward's logits bit for bit, so a
session decoding lean samples the same tokens with the same behaviour log-probs and entropies as one decoding
through `model(...)`: float32, bfloat16 weights, bf16 autocast, packed weights, grouped-query attention, a
Qwen2 model (biased projections), rows that stop apart and turns that reuse the cache."""

import copy

import pytest
import torch

from tracerl.models.precision import set_autocast
from tracerl.models.prepack import prepack, prepack_available
from tracerl.rollout import TorchEngine
from tracerl.rollout.kv_session import GenerationSession
from tracerl.rollout.lean_decode import LeanDecoder, lean_problem


def _gqa_llama(tok):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                                        pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)).eval()


def _qwen2(tok):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(1)
    return Qwen2ForCausalLM(Qwen2Config(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                                        pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)).eval()


def _variant(name, tiny):
    model, tok = tiny
    m = copy.deepcopy(model).eval()  # never the session-shared model
    if name == "bf16_weights":
        m = m.to(torch.bfloat16)
    elif name == "autocast":
        set_autocast(m, "bf16")
    elif name == "packed_fp32":
        prepack(m)
    elif name == "packed_bf16":
        prepack(m.to(torch.bfloat16))
    elif name == "gqa":
        m = _gqa_llama(tok)
    elif name == "qwen2":
        m = _qwen2(tok)
    return m


def _turns(model, tok, lean: bool):
    """Three turns of a session over groups of 2 rows with uneven budgets and a stop token."""
    engine = TorchEngine(model, tok, lean_decode=lean)
    session = GenerationSession(engine)
    assert (session._lean is not None) == lean
    texts = ["Ann has 3 apples.", "Bo has 12 coins. Bo gets 4 more. How many coins does Bo have?", "7"]
    seqs = [tok(t, add_special_tokens=False)["input_ids"] for t in texts for _ in range(2)]
    g = torch.Generator().manual_seed(7)
    stop = [tok.convert_tokens_to_ids("</code>"), tok.eos_token_id]
    out = []
    for turn in range(3):
        budgets = [5 + 4 * ((i + turn) % 3) for i in range(len(seqs))]
        got = session.generate(list(range(len(seqs))), seqs, max_new_tokens=budgets, generator=g,
                               stop_token_ids=stop, temperature=1.0)
        out.append([(s.token_ids, s.logprobs, s.entropies, s.finish) for s in got])
        seqs = [s + g_.token_ids + [5, 6, 7] for s, g_ in zip(seqs, got)]
    return out


@pytest.mark.parametrize("name", ["fp32", "bf16_weights", "autocast", "packed_fp32", "packed_bf16", "gqa", "qwen2"])
def test_a_lean_session_samples_what_the_hf_forward_samples_bit_for_bit(tiny, name):
    if name.startswith("packed") and not prepack_available():
        pytest.skip("this torch has no packed-weight kernels")
    model = _variant(name, tiny)
    lean, hf = _turns(model, tiny[1], True), _turns(model, tiny[1], False)
    assert lean == hf  # tokens, and log-probs and entropies as floats, equal
    assert sum(len(ids) for turn in lean for ids, *_ in turn) > 60  # decode steps were taken


def test_one_lean_step_gives_the_forwards_logits_and_writes_its_column(tiny):
    """Rows at different positions with holes in their masks, against the HF forward on the same cache."""
    from transformers.cache_utils import Cache

    from tracerl.rollout.kv_session import _Cursor, _SlotLayer

    model = _gqa_llama(tiny[1])
    rows, cols = 3, 12
    torch.manual_seed(3)
    n_layers = model.config.num_hidden_layers

    def cache_of():
        cursor = _Cursor()
        cursor.rows, cursor.cols, cursor.k, cursor.col = rows, cols, rows, 8
        layers = [_SlotLayer(cursor) for _ in range(n_layers)]
        g = torch.Generator().manual_seed(0)
        for layer in layers:
            layer.keys = torch.randn((rows, 2, cols, 8), generator=g)
            layer.values = torch.randn((rows, 2, cols, 8), generator=g)
            layer.is_initialized = True
        return Cache(layers=layers, layer_class_to_replicate=None)

    mask = torch.zeros((rows, cols), dtype=torch.bool)
    mask[0, 2:9] = mask[1, 0:9] = True
    mask[2, [1, 4, 5, 8]] = True
    step_mask = mask[:, None, None, :9]
    tokens, positions = torch.tensor([[5], [9], [11]]), torch.tensor([[7], [9], [4]])
    with torch.inference_mode():
        ref_cache, lean_cache = cache_of(), cache_of()
        ref = model(input_ids=tokens, attention_mask=step_mask, position_ids=positions, use_cache=True,
                    logits_to_keep=1, cache=ref_cache).logits[:, -1]
        got = LeanDecoder(model).step(tokens, positions, step_mask, lean_cache.layers, 8)
    assert torch.equal(got, ref)
    for a, b in zip(ref_cache.layers, lean_cache.layers):
        assert torch.equal(a.keys, b.keys) and torch.equal(a.values, b.values)
    assert not torch.equal(lean_cache.layers[0].keys[:, :, 8], cache_of().layers[0].keys[:, :, 8])  # column 8 written


def test_models_the_lean_step_does_not_cover_decode_through_their_forward(tiny):
    model, tok = tiny
    assert lean_problem(model) is None
    eager = copy.deepcopy(model)
    eager.set_attn_implementation("eager")
    assert "sdpa" in lean_problem(eager)
    assert GenerationSession(TorchEngine(eager, tok))._lean is None
    hooked = copy.deepcopy(model)
    hooked.register_forward_pre_hook(lambda module, args: None)  # a hook on the forward must see every step
    assert "hooks" in lean_problem(hooked) and GenerationSession(TorchEngine(hooked, tok))._lean is None
    wrapped = torch.nn.Sequential(model)
    assert "LlamaForCausalLM" in lean_problem(wrapped)
    with pytest.raises(ValueError, match="not Sequential"):
        LeanDecoder(wrapped)


def test_engine_lean_decode_from_a_recipe_turns_the_step_on_off_or_is_refused(tiny):
    from tracerl.config import load_recipe
    from tracerl.errors import UserError
    from tracerl.rollout.engines import build_engine

    model, tok = tiny
    on = build_engine(load_recipe("smoke", ["engine.lean_decode=true"]).engine, model, tok)
    off = build_engine(load_recipe("smoke", ["engine.lean_decode=false"]).engine, model, tok)
    auto = build_engine(load_recipe("smoke").engine, model, tok)
    assert [GenerationSession(e)._lean is not None for e in (on, off, auto)] == [True, False, True]
    eager = copy.deepcopy(model)
    eager.set_attn_implementation("eager")  # e.g. a bf16 learner on a CPU (model.attention: auto) shared by the engine
    assert GenerationSession(build_engine(load_recipe("smoke").engine, eager, tok))._lean is None
    with pytest.raises(UserError, match="engine.lean_decode is true but .* uses eager; unset engine.lean_decode"):
        build_engine(load_recipe("smoke", ["engine.lean_decode=true"]).engine, eager, tok)
