"""Run the gateway's app with uvicorn: in this process on a thread (tests, `tracerl train gateway_agent`)
or in the foreground (`tracerl serve`). Loopback by default; port 0 picks a free port."""

from __future__ import annotations

import socket
import threading
import time

import uvicorn

from tracerl.serve.app import build_app
from tracerl.serve.gateway import Gateway


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class ServerThread:
    """`with ServerThread(gateway) as srv: srv.base_url` — started and stopped with the block."""

    def __init__(self, gateway: Gateway, *, host: str = "127.0.0.1", port: int = 0, reap_every_s: float = 1.0):
        self.gateway, self.host = gateway, host
        self.port = port or free_port(host)
        config = uvicorn.Config(build_app(gateway), host=host, port=self.port, log_level="warning",
                                access_log=False, lifespan="off")
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
            self.gateway.registry.reap()
            time.sleep(every)

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
