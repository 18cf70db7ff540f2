"""A local Vast.ai REST API for the ``vastai`` SDK (``VastAI(server_url=...)``).

Endpoints: ``POST /api/v0/bundles/`` (offer search: the query's ``{field: {op: value}}`` filters,
``type`` on-demand|bid, ``order``, ``limit``), ``PUT /api/v0/asks/{id}/`` (rent: ``price`` is the
bid, null for on-demand; answers ``new_contract``; an offer already rented or a bid under
``min_bid`` is refused), ``GET /api/v0/instances/{id}/``, ``GET /api/v1/instances/`` (paged),
``DELETE /api/v0/instances/{id}/``, ``POST /api/v0/instances/{id}/ssh/`` (authorizes the key on
the test's sshd). Instances reach ``actual_status: running`` after ``boot_s``, with their SSH
endpoint on that sshd, both direct (``public_ipaddr`` + ``ports["22/tcp"]``) and through the
"proxy" (``ssh_host``/``ssh_port``). ``outbid(id)`` stops a bid instance and kills its processes.
``faults``: ``401``, ``429``, ``500``, ``malformed``, ``drop`` or ``slow`` (answers after 3 s).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.fakes.eviction import kill_container
from tests.fakes.http_server import FakeHandler, serving

OFFERS = [
    {"id": 1001, "machine_id": 501, "gpu_name": "H100 SXM", "num_gpus": 8, "cpu_cores_effective": 192,
     "dph_total": 16.8, "min_bid": 9.6, "reliability2": 0.998, "cuda_max_good": 12.8, "hosting_type": 1},
    {"id": 1002, "machine_id": 502, "gpu_name": "H100 SXM", "num_gpus": 8, "cpu_cores_effective": 96,
     "dph_total": 14.9, "min_bid": 8.1, "reliability2": 0.990, "cuda_max_good": 12.4, "hosting_type": 0},
    {"id": 2001, "machine_id": 601, "gpu_name": "cpu", "num_gpus": 1, "cpu_cores_effective": 2, "dph_total": 0.12,
     "min_bid": 0.05, "reliability2": 0.999, "cuda_max_good": 12.8, "hosting_type": 1},
    {"id": 2002, "machine_id": 602, "gpu_name": "cpu", "num_gpus": 1, "cpu_cores_effective": 2, "dph_total": 0.11,
     "min_bid": 0.04, "reliability2": 0.999, "cuda_max_good": 12.8, "hosting_type": 1},
    {"id": 2003, "machine_id": 603, "gpu_name": "cpu", "num_gpus": 2, "cpu_cores_effective": 2, "dph_total": 0.2,
     "min_bid": 0.08, "reliability2": 0.999, "cuda_max_good": 12.8, "hosting_type": 1},
]
DEFAULTS = {"verified": True, "external": False, "rentable": True, "rented": False}
OPS = {"eq": lambda a, b: a == b, "neq": lambda a, b: a != b, "gte": lambda a, b: a >= b,
       "lte": lambda a, b: a <= b, "gt": lambda a, b: a > b, "lt": lambda a, b: a < b,
       "in": lambda a, b: a in b, "notin": lambda a, b: a not in b}


class FakeVast:
    def __init__(self, api_key: str, ssh_port: int, authorized_keys: Path, workdir: Path, boot_s: float = 0.3) -> None:
        self.api_key, self.ssh_port, self.authorized_keys, self.workdir = api_key, ssh_port, authorized_keys, workdir
        self.boot_s = boot_s
        self.proxy_port = ssh_port
        """Where the "proxy" (``ssh_host``/``ssh_port``) answers; the same sshd unless a test says otherwise."""
        self.offers = {o["id"]: {**DEFAULTS, **o} for o in OFFERS}
        self.instances: dict[int, dict[str, Any]] = {}
        self.faults: list[str] = []
        self.rent_bodies: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self._next = 7000

    def search(self, q: dict[str, Any]) -> list[dict[str, Any]]:
        wanted = "bid" if q.get("type") == "bid" else "on-demand"
        filters = {k: v for k, v in q.items() if k not in ("order", "type", "limit", "allocated_storage")}
        found = []
        for offer in self.offers.values():
            if all(isinstance(cond, dict) and all(op in OPS and field in offer and OPS[op](offer[field], value)
                                                  for op, value in cond.items())
                   for field, cond in filters.items()):
                found.append({**offer, "type": wanted})
        for field, direction in reversed(q.get("order") or []):
            found.sort(key=lambda o, f=field: o.get(f, 0), reverse=direction == "desc")
        return found[: int(q["limit"])] if q.get("limit") else found

    def rent(self, offer_id: int, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self.lock:
            offer = self.offers.get(offer_id)
            if offer is None or offer["rented"]:
                return 400, {"success": False, "error": "no_such_ask", "msg": f"offer {offer_id} is not available"}
            bid = body.get("price")
            if bid is not None and bid < offer["min_bid"]:
                return 400, {"success": False, "error": "invalid_price", "msg": f"bid below min_bid {offer['min_bid']}"}
            offer["rented"] = True
            self._next += 1
            self.rent_bodies.append(body)
            self.instances[self._next] = {
                "id": self._next, "label": body.get("label"), "machine_id": offer["machine_id"],
                "is_bid": bid is not None, "dph_total": bid if bid is not None else offer["dph_total"],
                "intended_status": "running", "actual_status": "loading", "created": time.time(), "offer": offer_id,
                "gpu_name": offer["gpu_name"], "num_gpus": offer["num_gpus"],
                "cpu_cores_effective": offer["cpu_cores_effective"], "image_uuid": body.get("image"),
                "start_date": time.time(), "extra_env": [[k, v] for k, v in (body.get("env") or {}).items()]}
            return 200, {"success": True, "new_contract": self._next}

    def view(self, instance: dict[str, Any]) -> dict[str, Any]:
        row = dict(instance)
        if row["actual_status"] == "loading" and time.time() - row["created"] >= self.boot_s:
            instance["actual_status"] = row["actual_status"] = "running"
        up = row["actual_status"] == "running"
        row.update(ssh_host="127.0.0.1" if up else None, ssh_port=self.proxy_port if up else None,
                   public_ipaddr="127.0.0.1" if up else None,
                   ports={"22/tcp": [{"HostIp": "0.0.0.0", "HostPort": str(self.ssh_port)}]} if up else {})
        return row

    def destroy(self, instance_id: int) -> bool:
        with self.lock:
            instance = self.instances.pop(instance_id, None)
            if instance is not None:
                self.offers[instance["offer"]]["rented"] = False
            return instance is not None

    def outbid(self, instance_id: int) -> None:
        """Another renter outbid ours: the instance stops, its container's processes die."""
        with self.lock:
            instance = self.instances[instance_id]
            instance.update(intended_status="stopped", actual_status="exited")
        kill_container(self.workdir, str(instance["label"]).rsplit("--", 1)[-1])

    def inventory(self) -> list[int]:
        with self.lock:
            return sorted(self.instances)


@contextmanager
def running_fake_vast(fake: FakeVast) -> Iterator[str]:
    """Serve ``fake`` on 127.0.0.1; yields the server URL for ``VAST_URL``."""

    class Handler(FakeHandler):
        def _body(self) -> dict[str, Any]:
            raw = self.rfile.read(int(self.headers.get("Content-Length", 0)) or 0)
            return json.loads(raw) if raw else {}

        def _handle(self, method: str) -> None:
            body = self._body()
            if self.answer_fault(fake.faults, fake.api_key, b'{"offers": [',
                                 b'{"success": false, "error": "invalid_user_key"}'):
                return
            parts = urlsplit(self.path)
            path = [p for p in parts.path.split("/") if p]
            code, answer = self._route(method, path, body, parse_qs(parts.query))
            self.send_body(code, json.dumps(answer).encode(), "application/json")

        def _route(self, method: str, path: list[str], body: dict, query: dict) -> tuple[int, Any]:
            if method == "POST" and path == ["api", "v0", "bundles"]:
                return 200, {"offers": fake.search(body)}
            if method == "PUT" and path[:3] == ["api", "v0", "asks"]:
                return fake.rent(int(path[3]), body)
            if method == "GET" and path == ["api", "v1", "instances"]:
                with fake.lock:
                    rows = [fake.view(i) for i in fake.instances.values()]
                return 200, {"instances": rows, "next_token": None}
            if path[:3] == ["api", "v0", "instances"] and len(path) >= 4:
                instance_id = int(path[3])
                if method == "GET":
                    with fake.lock:
                        instance = fake.instances.get(instance_id)
                        return 200, {"instances": fake.view(instance) if instance else None}
                if method == "DELETE":
                    found = fake.destroy(instance_id)
                    return (200, {"success": True}) if found else (404, {"success": False, "error": "not_found"})
                if method == "POST" and path[4:] == ["ssh"]:
                    with fake.authorized_keys.open("a") as keys:
                        keys.write(body["ssh_key"].strip() + "\n")
                    return 200, {"success": True}
            return 404, {"success": False, "error": f"no route {method} {'/'.join(path)}"}


        def do_GET(self) -> None:
            self._handle("GET")

        def do_POST(self) -> None:
            self._handle("POST")

        def do_PUT(self) -> None:
            self._handle("PUT")

        def do_DELETE(self) -> None:
            self._handle("DELETE")

    with serving(Handler) as url:
        yield url
