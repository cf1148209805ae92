"""Run the gateway's app with uvicorn: in this process on a thread (tests, `tracerl train gateway_agent`)
or in the foreground (`tracerl serve`). Loopback by default; port 0 picks a free port.

A server that listens beyond loopback, or accepts weight pushes, refuses to start without an API key
(`key_problem`). Each request's line and headers must arrive within `header_timeout_s`
(guard.header_deadline_protocol) and be at most `MAX_HEADER_BYTES`; an idle keep-alive connection
closes after `KEEP_ALIVE_S`.
"""

from __future__ import annotations

import ipaddress
import socket
import threading
import time

import uvicorn

from tracerl.errors import UserError
from tracerl.serve.app import build_app
from tracerl.serve.gateway import Gateway
from tracerl.serve.guard import header_deadline_protocol

MAX_HEADER_BYTES = 64 << 10
KEEP_ALIVE_S = 5


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name other than localhost: it may resolve beyond this machine
        return False


def key_problem(host: str, accept_weights: bool, api_keys) -> str | None:
    """Why a server with these settings may not start without an API key (None: it may)."""
    if api_keys:
        return None
    if accept_weights:
        return ("a gateway that accepts weight pushes needs an API key; give --api-key KEY or set TRACERL_API_KEY "
                "(clients send it as 'Authorization: Bearer KEY')")
    if not is_loopback(host):
        return (f"a gateway listening on {host} (beyond loopback) needs an API key; give --api-key KEY or set "
                "TRACERL_API_KEY, or listen on 127.0.0.1")
    return None


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class ServerThread:
    """`with ServerThread(gateway) as srv: srv.base_url` — started and stopped with the block."""

    def __init__(self, gateway: Gateway, *, host: str = "127.0.0.1", port: int = 0, reap_every_s: float = 1.0,
                 header_timeout_s: float = 10.0):
        problem = key_problem(host, gateway.accept_weights, gateway.api_keys)
        if problem:
            raise UserError(problem)
        self.gateway, self.host = gateway, host
        self.port = port or free_port(host)
        config = uvicorn.Config(build_app(gateway), host=host, port=self.port, log_level="warning",
                                access_log=False, lifespan="off", http=header_deadline_protocol(header_timeout_s),
                                timeout_keep_alive=KEEP_ALIVE_S, h11_max_incomplete_event_size=MAX_HEADER_BYTES)
        self.server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self.server.run, name="tracerl-serve-http", daemon=True)
        self._reaper = threading.Thread(target=self._reap, args=(reap_every_s,), name="tracerl-serve-reaper", daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def start(self, timeout_s: float = 30.0) -> ServerThread:
        self._thread.start()
        deadline = time.time() + timeout_s
        while not self.server.started:
            if time.time() > deadline or not self._thread.is_alive():
                raise RuntimeError(f"the gateway did not start on {self.host}:{self.port} within {timeout_s:g} s")
            time.sleep(0.02)
        self._reaper.start()
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self._thread.join(timeout=10)

    def _reap(self, every: float) -> None:
        while not self.server.should_exit:
            try:
                self.gateway.registry.reap()
            except Exception:  # a failed pass (e.g. a verifier raising) must not end the reaper
                pass
            time.sleep(every)

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
