"""Environments written for other frameworks, trained on as tracerl environments (docs/adapters.md).

`env.name: verifiers:<module>` (verifiers_env.py) and `env.name: openenv:<module:Class>`
(openenv_env.py) are resolved the first time `get_env` sees the name: the adapter
imports the user's module, builds an `EnvSpec` under that exact name and registers it. Nothing here
imports the optional packages until such a name is asked for.
"""

from __future__ import annotations

from tracerl.envs.base import register_resolver

PREFIXES = ("verifiers:", "openenv:")


def resolve(name: str):
    """Register and return the `EnvSpec` of an adapter name (`verifiers:...`); None for any other name."""
    if name.startswith("verifiers:"):
        from tracerl.envs.adapters.verifiers_env import install

        return install(name)
    if name.startswith("openenv:"):
        from tracerl.envs.adapters.openenv_env import install as install_openenv

        return install_openenv(name)
    return None


for _scheme in PREFIXES:
    register_resolver(_scheme.rstrip(":"), resolve)

__all__ = ["resolve", "PREFIXES"]
