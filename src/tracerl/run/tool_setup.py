"""The chat template a run trains with (`model.chat_template`) and the native-tool conformance check.

Runs once the tokenizer exists (built, loaded or resumed), before it is saved and hashed: installs
tracerl's Hermes template where the recipe asks for it (or, in native tool mode, where the tokenizer
has none), grows the embeddings if that added `<|im_start|>` / `<|im_end|>`, then renders a sample tool
conversation through the template for every native-mode environment (rollout/tool_turns.py) and
refuses the run in one sentence (exit 2) when the template drops tool calls or would re-tokenize actions.
"""

from __future__ import annotations

from tracerl.models.chat_templates import apply_template_setting
from tracerl.errors import UserError
from tracerl.rollout.tool_turns import check_conformance


def prepare_tokenizer(recipe, model, tokenizer, routes) -> None:
    native = recipe.env.tool_format == "native"
    apply_template_setting(tokenizer, recipe.model.chat_template, native=native)
    emb = model.get_input_embeddings() if model is not None else None
    if emb is not None and len(tokenizer) > emb.num_embeddings:
        model.resize_token_embeddings(len(tokenizer))
    for route in routes if native else []:
        tools = getattr(route.spec.make(), "native_tools", None)
        problem = check_conformance(tokenizer, tools) if tools is not None else None
        if problem:
            raise UserError(f"env {route.name!r} in native tool mode: {problem}")
