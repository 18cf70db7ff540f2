"""EC2's two-minute spot interruption notice, read from the node's own instance metadata (IMDSv2).

EC2 announces the reclaim of a spot instance about two minutes before it acts: the metadata item
``/latest/meta-data/spot/instance-action`` appears, ``{"action": "terminate"|"stop"|"hibernate",
"time": "<UTC, ISO 8601>"}``; until then it answers 404 (docs.aws.amazon.com/AWSEC2/latest/UserGuide/
spot-instance-termination-notices.html). IMDSv2: a session token from ``PUT /latest/api/token``
(header ``X-aws-ec2-metadata-token-ttl-seconds``), sent with each ``GET`` as
``X-aws-ec2-metadata-token``; 401 means the token expired (docs .../configuring-instance-metadata-
service.html). The endpoint is ``http://169.254.169.254``, or ``AWS_EC2_METADATA_SERVICE_ENDPOINT``
when set (the variable botocore's own IMDS fetcher reads, botocore/utils.py IMDSFetcher), as
tests do to serve a fake on 127.0.0.1.

``SpotWatch`` polls in a daemon thread of the runner and, on a notice, writes it to
``spot_notice.json`` beside job.json (atomically); the profile's ranks look for that file at each
step boundary (``noticed``), agree on it, and stop there. Stdlib only. A metadata service that does
not answer is retried at the next poll; it never stops the payload.
"""

from __future__ import annotations

import json
import os
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))
"""The metadata service is link-local: never through an HTTP proxy the environment names."""
DEFAULT_ENDPOINT = "http://169.254.169.254"
ENDPOINT_ENV = "AWS_EC2_METADATA_SERVICE_ENDPOINT"
NOTICE_FILE = "spot_notice.json"
NOTICE_FILE_ENV = "BENCHCTL_SPOT_NOTICE_FILE"
"""Set by the runner for the rank processes it starts: where to look for the notice."""
RECLAIM_WAIT_S = 600.0
"""How long after a notice the payload waits for EC2 to end the node before it reports an error."""
TOKEN_TTL_S = 21600
POLL_S = 5.0
"""EC2 checks for the notice every 5 s in its own guidance; the notice comes ~120 s ahead."""


class SpotWatch:
    """Polls the instance-action item every ``poll_s`` until a notice is written or ``stop``."""

    def __init__(self, workdir: Path, endpoint: str | None = None, poll_s: float = POLL_S,
                 timeout_s: float = 2.0) -> None:
        self.path = workdir / NOTICE_FILE
        self.endpoint = (endpoint or os.environ.get(ENDPOINT_ENV) or DEFAULT_ENDPOINT).rstrip("/")
        self.poll_s, self.timeout_s = poll_s, timeout_s
        self._token: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="spot-notice", daemon=True)

    def start(self) -> SpotWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=self.timeout_s * 2 + 1)

    def _run(self) -> None:
        while not self._stop.is_set():
            notice = self.poll()
            if notice is not None:
                tmp = self.path.with_suffix(".tmp")
                tmp.write_text(json.dumps(notice))
                os.replace(tmp, self.path)
                return
            self._stop.wait(self.poll_s)

    def poll(self) -> dict[str, Any] | None:
        """The notice if EC2 has posted one, else None (also when the service does not answer)."""
        try:
            if self._token is None:
                self._token = self._request("PUT", "/latest/api/token",
                                            {"X-aws-ec2-metadata-token-ttl-seconds": str(TOKEN_TTL_S)})
            body = self._request("GET", "/latest/meta-data/spot/instance-action",
                                 {"X-aws-ec2-metadata-token": self._token})
        except urllib.error.HTTPError as exc:
            if exc.code == 401:
                self._token = None  # expired: a new one at the next poll
            return None  # 404: no notice yet
        except (OSError, ValueError):
            return None
        try:
            notice = json.loads(body)
        except ValueError:
            return None
        return {"action": str(notice.get("action", "")), "time": str(notice.get("time", ""))} \
            if isinstance(notice, dict) else None

    def _request(self, method: str, path: str, headers: dict[str, str]) -> str:
        request = urllib.request.Request(self.endpoint + path, method=method, headers=headers)
        with _DIRECT.open(request, timeout=self.timeout_s) as answer:
            return str(answer.read(4096).decode())


def notice_file() -> Path | None:
    """Where this process's runner has its ``SpotWatch`` write the notice (None: nothing watches)."""
    path = os.environ.get(NOTICE_FILE_ENV)
    return Path(path) if path else None


def noticed(path: Path) -> dict[str, Any] | None:
    """The notice ``SpotWatch`` wrote at ``path``, or None."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def wait_for_reclaim(stop: threading.Event | None = None, wait_s: float = RECLAIM_WAIT_S) -> None:
    """Idle while EC2 ends the node: the controller then reads it preempted (not a payload exit)
    with every measured step already in events.jsonl. Returns after ``wait_s`` if the node lives on."""
    (stop or threading.Event()).wait(wait_s)
