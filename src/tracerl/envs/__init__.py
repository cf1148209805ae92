"""Environments: the protocol, tool-call grammars and the built-in environments."""

from tracerl.envs.base import Env, EnvSpec, Message, Step, env_names, get_env, register_env

__all__ = ["Env", "EnvSpec", "Message", "Step", "env_names", "get_env", "register_env"]
