"""What the wire-level fakes share: a quiet request handler with helpers, served on 127.0.0.1."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class FakeHandler(BaseHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass

    def send_body(self, code: int, body: bytes, kind: str = "application/json") -> None:
        self.send_response(code)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def drop(self) -> None:
        """Close the connection without an answer (a reset, as a flaky proxy does)."""
        self.close_connection = True
        self.connection.shutdown(2)

    def answer_fault(self, faults: list[str], api_key: str, malformed: bytes, unauthorized: bytes,
                     public: bool = False) -> bool:
        """Serve the next injected fault (``drop``, ``slow``: 3 s late, ``malformed``, ``429``, ``500``,
        ``401``) or refuse a wrong key; True when that answered the request. ``public``: the endpoint
        also answers a request that carries no key at all (a wrong key is still refused)."""
        fault = faults.pop(0) if faults else None
        if fault == "drop":
            self.drop()
            return True
        if fault == "slow":
            time.sleep(3)
        if fault == "malformed":
            self.send_body(200, malformed)
            return True
        if fault in ("429", "500"):
            self.send_body(int(fault), b"<html>busy</html>", "text/html")
            return True
        anonymous = public and self.headers.get("Authorization") is None
        if fault == "401" or (not anonymous and self.headers.get("Authorization") != f"Bearer {api_key}"):
            self.send_body(401, unauthorized)
            return True
        return False


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that gave up on a slow answer (the timeout tests) is expected: say nothing of it."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


@contextmanager
def serving(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """Serve ``handler`` on a free port of 127.0.0.1 in a thread; yields ``http://127.0.0.1:PORT``."""
    server = _QuietServer(("127.0.0.1", 0), handler)
    # serve_forever checks for shutdown every poll_interval (0.5 s by default): at 20 ms, leaving the
    # `with` takes milliseconds, not up to half a second per test.
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
