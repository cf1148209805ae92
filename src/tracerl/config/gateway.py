"""The recipe's `gateway:` section: train an external agent through the in-process gateway."""

from __future__ import annotations

from pydantic import Field

from tracerl.config.base import Cfg


class GatewayConfig(Cfg):
    agent: str | None = None
    """`path/to/agent.py:function` (or `module:function`): an agent written against the OpenAI client,
    called as `function(base_url, model, question, episode_id)`; its episodes replace the in-process
    agent loop for RL and held-out evaluation. Null: the in-process agent loop (every other recipe)."""
    concurrency: int = Field(8, ge=1, le=256)
    """Agent episodes run at once (threads); their calls are batched by the gateway's engine worker."""
    agent_timeout_s: float = Field(300.0, gt=0, allow_inf_nan=False)
    """An agent episode still running after this long is abandoned and ends as `wall_timeout`."""
    idle_timeout_s: float = Field(120.0, gt=0, allow_inf_nan=False)
    """An open episode with no call or finish for this long ends as `wall_timeout` (the reaper)."""
    model_name: str = Field("tracerl-policy", min_length=1)
    """The model id the gateway serves (what the agent passes as `model`)."""
    max_body_bytes: int = Field(1 << 20, ge=1024)
    """The largest request body the gateway reads (413 above it, before parsing); `tracerl serve --max-body-bytes`."""
    call_timeout_s: float = Field(300.0, gt=0, allow_inf_nan=False)
    """The longest a call waits for the engine before a 503 (`tracerl serve --call-timeout`)."""
