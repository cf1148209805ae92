"""The OpenAI-compatible gateway (docs/gateway.md): serve an engine over HTTP, record every call as a
span of an episode, and turn episodes into trajectories by exact-prefix merging."""

from tracerl.serve.episodes import EnvVerifier, EpisodeRegistry
from tracerl.serve.gateway import Gateway
from tracerl.serve.trajectories import build_trajectories, segments

__all__ = ["EnvVerifier", "EpisodeRegistry", "Gateway", "build_trajectories", "segments"]
