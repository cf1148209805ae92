"""The calculator agent written with the OpenAI Agents SDK, on its default model class
(`OpenAIResponsesModel`: the Responses API) and `Runner.run_streamed`: no tracerl import.

The SDK's provider gets an `AsyncOpenAI` client pointed at the gateway with the episode in the
`X-Episode-Id` header; every model call is then a `/v1/responses` call the gateway records as a span.
`tracerl train gateway_agent gateway.agent=examples/gateway_agent/sdk_agent.py:run_episode` trains it.

    python examples/gateway_agent/sdk_agent.py --base-url http://127.0.0.1:8000/v1 "Ann has 3 coins. ..."
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

from openai import AsyncOpenAI

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from agent import INSTRUCTIONS, calculator as _calculate  # noqa: E402  (the same tool as the openai-only agent)


def build_agent(model: str):
    from agents import Agent, function_tool

    @function_tool
    def calculator(expression: str) -> str:
        """Evaluate an arithmetic expression (+ - * / and parentheses)."""
        return _calculate(expression)

    return Agent(name="calculator agent", instructions=INSTRUCTIONS, model=model, tools=[calculator])


async def _run(base_url: str, model: str, question: str, episode_id: str | None, max_turns: int) -> str:
    from agents import RunConfig, Runner, set_tracing_disabled
    from agents.models.openai_provider import OpenAIProvider

    set_tracing_disabled(True)  # no traces go to api.openai.com
    headers = {"X-Episode-Id": episode_id} if episode_id else {}
    client = AsyncOpenAI(base_url=base_url, api_key="not-needed", max_retries=0, timeout=120, default_headers=headers)
    try:
        config = RunConfig(model_provider=OpenAIProvider(openai_client=client), tracing_disabled=True)
        result = Runner.run_streamed(build_agent(model), question, run_config=config, max_turns=max_turns)
        async for _ in result.stream_events():
            pass
        return str(result.final_output or "")
    finally:
        await client.close()


def run_episode(base_url: str, model: str, question: str, episode_id: str | None = None, *, max_turns: int = 3) -> str:
    """Solve one question with the SDK's default model class; returns the final output (the caller scores it).
    Running out of turns, or a reply cut off by its token budget (the SDK raises on `response.incomplete`),
    returns "": an unanswered episode (the gateway ends it as a `max_tokens` truncation when cut off)."""
    from agents.exceptions import MaxTurnsExceeded, ModelBehaviorError

    try:
        return asyncio.run(_run(base_url, model, question, episode_id, max_turns))
    except MaxTurnsExceeded:
        return ""
    except ModelBehaviorError as err:
        if "incomplete" not in str(err):
            raise
        return ""


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("question")
    ap.add_argument("--base-url", default="http://127.0.0.1:8000/v1")
    ap.add_argument("--model", default="tracerl")
    args = ap.parse_args()
    print(run_episode(args.base_url, args.model, args.question))
