"""Environments: the protocol, tool-call grammars, the built-in environments, and what an
environment needs to reward through a registered verifier (`EnvVerifier`, `grade`)."""

from tracerl.envs._verify import EnvVerifier, grade
from tracerl.envs.base import Env, EnvSpec, Message, Step, env_names, get_env, register_env

__all__ = ["Env", "EnvSpec", "EnvVerifier", "Message", "Step", "env_names", "get_env", "grade", "register_env"]
