"""The HTTP surface (FastAPI): the OpenAI routes and the episode routes, errors in OpenAI's shape.

Routes: `GET /v1/models`, `POST /v1/chat/completions`, `POST /v1/completions` (both with `stream`,
serve/streaming.py), `POST /v1/responses` (serve/responses.py); `POST /v1/episodes`
(start), `GET /v1/episodes/{id}`, `POST /v1/episodes/{id}/finish` (a reward, a task id or an error),
`GET /v1/episodes/{id}/trajectories`; `GET /health`; `POST /v1/weights?version=N` (a safetensors body: the
trainer's new weights; only with `tracerl serve --accept-weights`). Handlers are plain functions, so FastAPI runs
them on its thread pool and the engine worker batches whatever arrives together.

`guard.py` runs before every route (API key, body cap and deadline, undecodable text); any exception
a handler did not expect is a 500 in the same OpenAI error JSON, never a plain-text page.
"""

from __future__ import annotations

from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from tracerl.contract import to_dict
from tracerl.serve.errors import APIError, validation_message
from tracerl.serve.gateway import Gateway
from tracerl.serve.guard import PRINCIPAL_HEADER, Guard
from tracerl.serve.responses import ResponsesRequest, response_events, to_chat, to_response
from tracerl.serve.schemas import ChatRequest, CompletionRequest, EpisodeFinish, EpisodeStart
from tracerl.serve.streaming import chat_chunks, completion_chunks


def build_app(gateway: Gateway) -> FastAPI:
    app = FastAPI(title="tracerl gateway", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.gateway = gateway
    from tracerl.serve.weights import state_bytes

    app.add_middleware(Guard, api_keys=frozenset(gateway.api_keys), max_body_bytes=gateway.max_body_bytes,
                       weights_max_bytes=state_bytes(gateway.engine.model), body_timeout_s=gateway.body_timeout_s)

    def who(request: Request) -> dict:
        """The caller (guard.py's principal) and the episode token it sent, for the episode checks."""
        return {"principal": request.headers.get(PRINCIPAL_HEADER, ""),
                "token": request.headers.get("x-episode-token")}

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, err: Exception):
        body = APIError(500, f"the gateway failed on this request ({type(err).__name__}); nothing was recorded, "
                             "retry it or report the request", type="server_error", code="internal_error").body()
        return JSONResponse(body, status_code=500)

    @app.exception_handler(APIError)
    async def _api_error(request: Request, err: APIError):
        return JSONResponse(err.body(), status_code=err.status)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, err: RequestValidationError):
        message, param = validation_message(list(err.errors()))
        return JSONResponse(APIError(400, message, param=param).body(), status_code=400)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, err: StarletteHTTPException):
        message = (f"no route {request.method} {request.url.path}; see GET /v1/models, POST /v1/chat/completions, "
                   "POST /v1/completions and /v1/episodes") if err.status_code in (404, 405) else str(err.detail)
        return JSONResponse(APIError(err.status_code, message).body(), status_code=err.status_code)

    @app.get("/health")
    def health() -> dict:
        return {"status": "ok", "policy_version": gateway.policy_version, **gateway.registry.stats()}

    @app.get("/v1/models")
    def models() -> dict:
        return gateway.models()

    @app.post("/v1/chat/completions")
    def chat(body: ChatRequest, request: Request):
        out = gateway.chat(body, request.headers)  # sampled and recorded (or refused) before any byte is sent
        if body.stream:
            usage = bool((body.stream_options or {}).get("include_usage"))
            return StreamingResponse(chat_chunks(out, gateway.tokenizer, usage), media_type="text/event-stream")
        return out

    @app.post("/v1/completions")
    def completions(body: CompletionRequest, request: Request):
        out = gateway.completion(body, request.headers)
        if body.stream:
            usage = bool((body.stream_options or {}).get("include_usage"))
            return StreamingResponse(completion_chunks(out, gateway.tokenizer, usage), media_type="text/event-stream")
        return out

    @app.post("/v1/responses")
    def responses(body: ResponsesRequest, request: Request):
        chat_req, strict = to_chat(body)
        out = gateway.chat(chat_req, request.headers)
        raw = gateway.tokenizer.decode(out["choices"][0]["token_ids"], skip_special_tokens=True)
        resp = to_response(body, out, strict, raw)
        return StreamingResponse(response_events(resp), media_type="text/event-stream") if body.stream else resp

    @app.post("/v1/weights")
    async def weights(request: Request, version: int = Query(ge=0, lt=1 << 63)) -> dict:
        if not gateway.accept_weights:
            raise APIError(403, "this server does not accept weight pushes; start it with --accept-weights",
                           code="weights_refused")
        if not gateway.api_keys:
            raise APIError(403, "this server takes weight pushes only behind an API key; start it with --api-key "
                                "(or TRACERL_API_KEY) and send that key", code="weights_refused")
        from safetensors import SafetensorError
        from safetensors.torch import load as load_safetensors

        try:
            state = load_safetensors(await request.body())
        except (SafetensorError, ValueError, RuntimeError) as err:
            raise APIError(400, f"the body is not a safetensors file ({err}); send safetensors.torch.save(state_dict)",
                           param="weights") from None
        from starlette.concurrency import run_in_threadpool

        await run_in_threadpool(gateway.load_weights, state, version)  # waits for the batch in flight
        return {"policy_version": gateway.policy_version, "tensors": len(state)}

    @app.post("/v1/episodes")
    def start(body: EpisodeStart, request: Request) -> dict:
        ep = gateway.registry.start(body.episode_id, task_id=body.task_id, group_id=body.group_id, metadata=body.metadata,
                                    principal=who(request)["principal"])
        return {**ep.summary(), "episode_token": gateway.registry.token(ep.episode_id)}  # returned only here

    @app.get("/v1/episodes/{episode_id}")
    def show(episode_id: str, request: Request) -> dict:
        return gateway.registry.get(episode_id, **who(request)).summary()

    @app.post("/v1/episodes/{episode_id}/finish")
    def finish(episode_id: str, body: EpisodeFinish, request: Request) -> dict:
        ep = gateway.registry.finish(episode_id, reward=body.reward, task_id=body.task_id, answer=body.answer,
                                     error=body.error, **who(request))
        return ep.summary()

    @app.get("/v1/episodes/{episode_id}/trajectories")
    def trajectories(episode_id: str, request: Request) -> dict:
        ep = gateway.registry.get(episode_id, **who(request))
        return {**ep.summary(), "data": [to_dict(t) for t in ep.trajectories]}

    return app
