"""A node ends its own bill: ``python -m payload self-destroy PROVIDER ID --api URL``.

The dead-man switch (``deadman``) runs the provider's ``idle_shutdown`` command once it stopped the
payload; on Vast.ai and RunPod that command is this one. The instance or pod id and the API's
address come from the controller (they are in the command, which is in ``job.json``); the key
is the one the provider put in the container's own environment, read at that moment from PID 1's
environment (``/proc/1/environ``, ``--environ``), because a process started over SSH does not
inherit the container's environment. The key is used for the one call and never printed or
written anywhere.

- ``vastai``: ``DELETE {api}/api/v0/instances/{id}/`` with ``CONTAINER_API_KEY``, the
  per-instance key Vast.ai puts in every instance beside ``CONTAINER_ID``, the instance's id
  (docs.vast.ai guides/instances/docker-environment, "Predefined Variables").
- ``runpod``: the ``podTerminate`` mutation at ``{api}/graphql`` with ``RUNPOD_API_KEY``, the
  pod-scoped key RunPod puts in every pod beside ``RUNPOD_POD_ID`` (docs.runpod.io
  pods/references/environment-variables).

An id in the environment that differs from the one given destroys nothing (exit 2: this is not
the node the controller rented), as does a missing key. A refusal that may pass (no answer, 429,
5xx) is retried, bounded; an instance already gone is success. Exit 0 destroyed, 1 failed.
"""

from __future__ import annotations

import json
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

ENVIRON = "/proc/1/environ"
PROVIDERS = {"vastai": ("CONTAINER_API_KEY", "CONTAINER_ID"), "runpod": ("RUNPOD_API_KEY", "RUNPOD_POD_ID")}
"""Per provider: the environment variables of the container's own key and own id."""
TRIES = 6
TIMEOUT_S = 30.0
TERMINATE_POD = "mutation Terminate($podId: String!) { podTerminate(input: {podId: $podId}) }"


class Refused(Exception):
    """The API refused for good (a 4xx other than 404/429, or a GraphQL error)."""


def container_environment(path: str | Path = ENVIRON) -> dict[str, str]:
    """A process's environment as ``/proc/<pid>/environ`` holds it (NUL-separated ``K=V``); {} when unreadable."""
    try:
        raw = Path(path).read_bytes()
    except OSError:
        return {}
    pairs = (item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, v in pairs}


def _request(provider: str, node_id: str, api: str, key: str) -> urllib.request.Request:
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    if provider == "vastai":
        return urllib.request.Request(f"{api.rstrip('/')}/api/v0/instances/{int(node_id)}/", data=b"{}",
                                      headers=headers, method="DELETE")
    body = json.dumps({"query": TERMINATE_POD, "variables": {"podId": node_id}}).encode()
    return urllib.request.Request(f"{api.rstrip('/')}/graphql", data=body, headers=headers, method="POST")


def _send(request: urllib.request.Request) -> bool:
    """True when the node is destroyed or already gone; raises ``Refused`` for good, ``OSError`` to retry."""
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            answer = json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return True
        if exc.code == 429 or exc.code >= 500:
            raise OSError(f"HTTP {exc.code}") from exc
        raise Refused(f"HTTP {exc.code}") from exc
    except ValueError as exc:  # an unreadable answer
        raise OSError("an unreadable answer") from exc
    errors = answer.get("errors") if isinstance(answer, dict) else None
    if errors:
        raise Refused(str(errors[0].get("message", errors[0]))[:200])
    return True


def self_destroy(provider: str, node_id: str, api: str, environ: str | Path = ENVIRON,
                 sleep: Callable[[float], None] = time.sleep) -> int:
    """Destroy this node (see the module doc); the exit code."""
    key_name, id_name = PROVIDERS[provider]
    env = container_environment(environ)
    key, own_id = env.get(key_name), env.get(id_name)
    if not key:
        print(f"self-destroy: no {key_name} in {environ}: nothing destroyed", file=sys.stderr)
        return 2
    if own_id and own_id != node_id:
        print(f"self-destroy: this container is {id_name}={own_id}, not {node_id}: nothing destroyed", file=sys.stderr)
        return 2
    for attempt in range(TRIES):
        try:
            _send(_request(provider, node_id, api, key))
            print(f"self-destroy: {provider} {node_id} destroyed", file=sys.stderr)
            return 0
        except Refused as exc:
            print(f"self-destroy: {provider} refused to destroy {node_id}: {exc}", file=sys.stderr)
            return 1
        except OSError as exc:
            print(f"self-destroy: try {attempt + 1} of {TRIES} failed: {exc}", file=sys.stderr)
            if attempt + 1 < TRIES:
                sleep(min(30.0, 3.0 * 2 ** attempt))
    return 1
