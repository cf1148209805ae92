"""The registry: names, descriptions and sources; lookups; the `tracerl algorithms` listing."""

import pytest

from tracerl.algorithms import registry

EXPECTED = {
    "grpo", "dr_grpo", "rloo", "gae", "gae_decoupled", "vapo_gae", "policy_loss", "k1", "k2", "k3", "kl_loss",
}


def test_public_names_are_registered_with_description_and_source():
    names = registry.names()
    assert names == sorted(names)
    assert EXPECTED <= set(names)
    for entry in registry.entries():
        assert entry.description and "\n" not in entry.description
        assert entry.source
        assert entry.kind in registry.KINDS
        assert callable(entry.fn)


def test_get_returns_the_function_and_suggests_near_names():
    from tracerl.algorithms.advantages import grpo

    assert registry.get("grpo") is grpo
    with pytest.raises(KeyError, match="did you mean 'grpo'"):
        registry.get("grpoo")


def test_a_clashing_registration_is_refused():
    with pytest.raises(ValueError, match="already registered"):
        registry.register("grpo", kind="advantage", description="x", source="y")(lambda: None)
    with pytest.raises(ValueError, match="kind"):
        registry.register("new_name", kind="nonsense", description="x", source="y")
