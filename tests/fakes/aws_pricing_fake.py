"""AWS's Price List Query API (``pricing``) on 127.0.0.1, which moto lacks: ``GetProducts`` over the
JSON 1.1 wire format botocore speaks (POST, ``X-Amz-Target: AWSPriceListService.GetProducts``,
``application/x-amz-json-1.1``; botocore's pricing model, ``targetPrefix`` AWSPriceListService).

- ``answers[(region, instance type)]``: the ``PriceList`` (JSON strings) for a request whose
  TERM_MATCH filters name that ``regionCode`` and ``instanceType``; anything else: an empty list
  (AWS's answer when nothing matches).
- ``error``: (code, message, HTTP status) answered instead, as a JSON 1.1 error (``__type``);
  ``AccessDeniedException`` is what credentials without ``pricing:GetProducts`` get ("User: arn:… is
  not authorized to perform: pricing:GetProducts", github.com/aws/karpenter/issues/2172).
- ``requests``: each request's body as sent.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

TARGET = "AWSPriceListService.GetProducts"
DENIED = ("AccessDeniedException", "User: arn:aws:iam::123456789012:user/bench is not authorized to perform: "
          "pricing:GetProducts", 400)


class FakePricing:
    def __init__(self) -> None:
        self.answers: dict[tuple[str, str], list[str]] = {}
        self.error: tuple[str, str, int] | None = None
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def answer(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self.lock:
            self.requests.append(body)
            if self.error:
                code, message, status = self.error
                return status, {"__type": code, "Message": message}
            terms = {f["Field"]: f["Value"] for f in body.get("Filters") or [] if f.get("Type") == "TERM_MATCH"}
            found = self.answers.get((terms.get("regionCode", ""), terms.get("instanceType", "")), [])
            return 200, {"FormatVersion": "aws_v1", "PriceList": found}


@contextmanager
def serving_pricing(fake: FakePricing) -> Iterator[str]:
    """Serve ``fake`` on 127.0.0.1; ``AWS_ENDPOINT_URL_PRICING`` points boto3's pricing clients at it
    while it runs (the caller restores the environment)."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
            if self.headers.get("X-Amz-Target") != TARGET:
                status, reply = 400, {"__type": "UnknownOperationException", "Message": "not served by the fake"}
            else:
                status, reply = fake.answer(body)
            data = json.dumps(reply).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/x-amz-json-1.1")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    os.environ["AWS_ENDPOINT_URL_PRICING"] = url
    try:
        yield url
    finally:
        server.shutdown()
        server.server_close()
