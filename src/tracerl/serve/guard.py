"""What stands in front of every route: the API key, the body-size cap, the body deadline, and text
that cannot be encoded. A pure ASGI middleware, so each check runs before FastAPI parses anything.

- **API key.** With keys configured, every route needs `Authorization: Bearer KEY` (401 otherwise,
  before the body is read). Each key is its own principal, a fingerprint of the key that the guard
  passes on as the `X-Tracerl-Principal` header (a client's own header of that name is dropped), so
  episodes can be tied to the key that started them (episodes.py).
- **Body size.** A `Content-Length` above the route's cap is refused (413) without reading the body
  into memory; a body without one (chunked) is counted as it arrives and refused as soon as it passes
  the cap. The cap is `max_body_bytes` for every route except `POST /v1/weights`, whose cap is the
  served model's own size plus a margin for the safetensors header.
- **Body deadline.** The whole body must arrive within `body_timeout_s` (408), so a client that
  trickles its body cannot hold a worker forever. Slow *headers* are cut by `HeaderDeadlineH11`.
- **Text.** A JSON body must be UTF-8 without lone surrogates (`"\\ud800"` escapes decode to text no
  tokenizer or log can encode): 400, instead of a plain-text 500 deep in the engine.

Every refusal is the OpenAI error JSON, and a refused body is drained (up to `DRAIN_BYTES`, never
kept) before the answer, so an ordinary client reads the 4xx instead of a reset connection.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import re

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from tracerl.serve.errors import APIError

PRINCIPAL_HEADER = "x-tracerl-principal"
DRAIN_BYTES = 64 << 20  # a refused body is read and dropped up to this much, then the connection closes
DRAIN_S = 2.0
_ESCAPED_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def key_fingerprint(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def _has_lone_surrogate(value) -> bool:
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return True
        return False
    if isinstance(value, dict):
        return any(_has_lone_surrogate(k) or _has_lone_surrogate(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_lone_surrogate(v) for v in value)
    return False


class Guard:
    def __init__(self, app, *, api_keys: frozenset[str] = frozenset(), max_body_bytes: int = 1 << 20,
                 weights_max_bytes: int | None = None, body_timeout_s: float = 30.0):
        self.app = app
        self._keys = {key_fingerprint(k): k.encode() for k in api_keys}
        self.max_body_bytes, self.body_timeout_s = max_body_bytes, body_timeout_s
        self.weights_max_bytes = weights_max_bytes or max_body_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = dict(scope.get("headers") or [])
        principal = self._principal(headers.get(b"authorization", b""))
        if principal is None:
            return await self._refuse(receive, send, APIError(
                401, "this gateway needs an API key; send it as 'Authorization: Bearer KEY' (the key the server was "
                     "started with, --api-key or TRACERL_API_KEY)", type="authentication_error",
                code="invalid_api_key"), drain=True)
        scope["headers"] = [(k, v) for k, v in scope.get("headers") or [] if k != PRINCIPAL_HEADER.encode()] + [
            (PRINCIPAL_HEADER.encode(), principal.encode())]
        weights = scope["path"].rstrip("/").endswith("/v1/weights")
        cap = self.weights_max_bytes if weights else self.max_body_bytes
        length = headers.get(b"content-length")
        if length is not None:
            if not length.isdigit():
                return await self._refuse(receive, send, APIError(
                    400, "the Content-Length header is not a number; send the body's length in bytes"), drain=False)
            if int(length) > cap:
                return await self._refuse(receive, send, self._too_large(cap, int(length)), drain=True)
        try:
            body = await self._read(receive, cap)
        except APIError as err:
            return await self._refuse(receive, send, err, drain=err.status == 413)
        if body and not weights:
            problem = self._text_problem(body)
            if problem:
                return await self._send(send, APIError(400, problem, code="invalid_text"))
        sent = False

        async def replay():
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # after the body: wait for the disconnect like any ASGI app

        return await self.app(scope, replay, send)

    # -- checks ---------------------------------------------------------------------------------------
    def _principal(self, auth: bytes) -> str | None:
        """"" without keys (every client is the same principal); the key's fingerprint; None: refused."""
        if not self._keys:
            return ""
        scheme, _, given = auth.partition(b" ")
        if scheme.lower() != b"bearer":
            return None
        given = given.strip()
        found = None
        for fp, key in self._keys.items():  # compare with every key, in constant time each
            if hmac.compare_digest(given, key):
                found = fp
        return found

    @staticmethod
    def _too_large(cap: int, got: int | None = None) -> APIError:
        size = f" ({got} bytes)" if got is not None else ""
        return APIError(413, f"the request body{size} is larger than this gateway's limit of {cap} bytes; send a "
                             "smaller request or start the server with a larger --max-body-bytes",
                        code="request_too_large")

    async def _read(self, receive, cap: int) -> bytes:
        chunks, size = [], 0
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.body_timeout_s
        while True:
            left = deadline - loop.time()
            try:
                if left <= 0:
                    raise asyncio.TimeoutError
                message = await asyncio.wait_for(receive(), left)
            except asyncio.TimeoutError:
                raise APIError(408, f"the request body did not arrive within {self.body_timeout_s:g} s; send it "
                                    "at once", code="request_timeout") from None
            if message["type"] == "http.disconnect":
                raise APIError(400, "the client disconnected before sending the whole body; send it again")
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > cap:
                raise self._too_large(cap)
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    @staticmethod
    def _text_problem(body: bytes) -> str | None:
        try:
            body.decode("utf-8")
        except UnicodeDecodeError as err:
            return (f"the request body is not valid UTF-8 (byte {err.start}); send JSON text encoded as UTF-8")
        if _ESCAPED_SURROGATE.search(body):  # a surrogate escape: fine in a pair (an emoji), not alone
            try:
                value = json.loads(body)
            except (ValueError, RecursionError):
                return None  # FastAPI answers unparseable JSON with its own 400
            if _has_lone_surrogate(value):
                return ("the request contains a lone UTF-16 surrogate escape (e.g. '\\ud800') that is not text; "
                        "send valid Unicode strings")
        return None

    # -- answers --------------------------------------------------------------------------------------
    async def _refuse(self, receive, send, err: APIError, *, drain: bool) -> None:
        if drain:  # read and drop what the client is still sending, so it can read the answer
            loop = asyncio.get_running_loop()
            deadline, size = loop.time() + DRAIN_S, 0
            try:
                while size < DRAIN_BYTES and loop.time() < deadline:
                    message = await asyncio.wait_for(receive(), max(deadline - loop.time(), 0.01))
                    size += len(message.get("body", b""))
                    if message["type"] != "http.request" or not message.get("more_body", False):
                        break
            except asyncio.TimeoutError:
                pass
        await self._send(send, err)

    @staticmethod
    async def _send(send, err: APIError) -> None:
        payload = json.dumps(err.body()).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
        if err.status == 401:
            headers.append((b"www-authenticate", b"Bearer"))
        await send({"type": "http.response.start", "status": err.status, "headers": headers})
        await send({"type": "http.response.body", "body": payload})


def header_deadline_protocol(timeout_s: float) -> type[H11Protocol]:
    """uvicorn's h11 protocol with a deadline on each request's headers: a connection whose request
    line and headers are not complete `timeout_s` after it opened (or after the previous response)
    is closed. uvicorn's own keep-alive timer is disarmed by every received byte, so a client sending
    a byte at a time would otherwise hold the connection forever."""

    class HeaderDeadlineH11(H11Protocol):
        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self._arm_header_deadline()

        def _arm_header_deadline(self) -> None:
            self._header_deadline = self.loop.call_later(timeout_s, self._header_deadline_passed)

        def _header_deadline_passed(self) -> None:
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                self.transport.close()  # still waiting for a complete request line and headers

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._header_deadline.cancel()
                self._arm_header_deadline()

        def connection_lost(self, exc) -> None:
            self._header_deadline.cancel()
            super().connection_lost(exc)

    return HeaderDeadlineH11
