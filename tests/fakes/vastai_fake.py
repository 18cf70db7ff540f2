"""A local Vast.ai REST API for the ``vastai`` SDK (``VastAI(server_url=...)``).

Endpoints: ``POST /api/v0/bundles/`` (offer search: the query's ``{field: {op: value}}`` filters,
``type`` on-demand|bid, ``order``, ``limit``, ``allocated_storage``), ``PUT /api/v0/asks/{id}/``
(rent: ``price`` is the bid, null for on-demand; answers ``new_contract``), ``GET
/api/v0/instances/{id}/``, ``GET /api/v1/instances/`` (keyset pages of at most 25: ``limit``,
``after_token``/``next_token``; ``select_filters`` on ``label``), ``DELETE /api/v0/instances/{id}/``,
``POST /api/v0/instances/{id}/ssh/`` (authorizes the key on the test's sshd). Instances reach
``actual_status: running`` after ``boot_s``, with their SSH endpoint on that sshd, both direct
(``public_ipaddr`` + ``ports["22/tcp"]``, the port ``direct_port`` names) and through the "proxy"
(``ssh_host``/``ssh_port``). ``faults``: ``401``, ``429``, ``500``,
``malformed``, ``drop``, ``slow`` (answers after 3 s), ``quota`` (the next search answers the daily
quota 429) and ``slow_create`` (the next rent succeeds, then answers after 1.5 s).

Each behaviour below cites where the real API shows it (see also tests/fakes/README.md, Vast.ai):

- Rate limits: a minimum interval per endpoint and per identity (the API key here), answered with
  a 429 in plain text "API requests too frequent endpoint threshold=N" and no ``Retry-After``
  (docs.vast.ai/api-reference/rate-limits-and-errors; the thresholds are the 429 examples of
  vast-ai/docs api-reference/openapi.yaml @c6246226: PUT asks 4.5 s, DELETE instances/{id} 3.0 s,
  GET instances/{id} 2.0 s, GET v1/instances 1.0 s). The search interval (6 s: 10 a minute) is
  issue 16's; the openapi's bundles 429 names no threshold. A refused call does not move the
  interval. ``rate_scale`` shrinks every interval for fast tests; ``clock`` is what they are measured on.
- The daily search quota: 429 ``{"error": "search_quota_exceeded"}``, reset at midnight UTC and
  never retried by the SDK (vastai 1.9.1 ``vastai/api/client.py`` ``is_search_quota_exceeded``).
- Renting an unknown offer: 404 ``{"success": false, "error": "invalid_args", "msg": "error 404/3603:
  no_such_ask Instance type by id N is not available.", "ask_id"}`` (vast-ai/docs @c6246226
  ``api-reference/openapi/yaml/create_instance.yaml`` and ``openapi.yaml``, PUT /api/v0/asks/{id}/, 404
  example: the code is ``invalid_args``, ``no_such_ask`` is in the message only).
- Renting an offer that cannot start now (rented meanwhile, or in ``unschedulable``): with
  ``cancel_unavail`` true, 410 ``{"error": "no_such_ask", "msg": "error 410/3907: no_such_ask Instance
  type N is no longer available."}`` (same files: 410 "Offer no longer available (when cancel_unavail
  is true and instance cannot start)"); with it false, which the SDK sends unless told (vastai
  ``api/instances.py`` ``build_create_instance_payload``: ``"cancel_unavail": cancel_unavail``,
  default False, overriding the server's own default of true for on-demand), the instance is created
  stopped, billing its disk, and the answer is a success naming it (vast-cli ``--cancel-unavail``:
  "Return error if scheduling fails (rather than creating a stopped instance)"). Which states such
  an instance shows is not documented: here it waits, ``intended_status`` running and
  ``actual_status`` null.
- Search filters: only documented fields filter; an undocumented one (``reliability2``) is ignored
  silently (vast-cli ``vast.py`` ``offers_fields``: ``reliability`` listed, ``reliability2``
  commented out; openapi.yaml ``/api/v0/bundles`` documents ``reliability``).
- Prices: an offer's ``dph_total`` includes ``allocated_storage`` GB of disk (the SDK sends 5 GB
  unless told: vastai ``api/offers.py`` ``search_offers(storage=5.0)``), at ``storage_cost`` $/GB per
  30-day month (vast.py field docs "storage cost in $/GB/month"; vastai
  ``cli/commands/price_increase.py`` ``_SEC_PER_MONTH = 3600 * 24 * 30``); ``min_bid`` is the
  machine's price without storage. An instance's ``dph_total`` is its price plus the storage of
  the ``disk`` it was created with.
- Status: ``actual_status`` is the container's state (null, created, loading, running, stopped,
  frozen, exited, rebooting, unknown, offline: vast-cli ``vastai/SKILL.md`` "Instance status
  values"), ``intended_status`` the renter's intent. An outbid bid instance shows ``cur_state``,
  ``intended_status`` and ``next_state`` all ``stopped`` (dstack reads exactly that as a spot
  interruption: dstackai/dstack ``src/dstack/_internal/core/backends/vastai/compute.py``,
  ``update_provisioning_data``, commit 71b416c4 "Detect Vast.ai interruptions during
  provisioning"); it keeps its disk, which bills, and may resume by itself when its bid wins again
  (docs guides/instances/choosing/instance-types.mdx, "Interruptible Instances").
- Per-instance keys: every instance's container has ``CONTAINER_API_KEY``, a key for that
  instance, and ``CONTAINER_ID``, its id; "you can also stop or destroy the instance from within"
  with them (vast-ai/docs ``guides/instances/docker-environment.mdx``, "Predefined Variables" and
  "Using the CLI from Inside an Instance"). The fake accepts that key for its own instance's GET and
  DELETE only; ``container_environ`` is the environment the container's PID 1 has. The same page
  warns that SSH sessions do not see these variables.
- A bid that loses at rent time (under the machine's current ``min_bid``) still creates the
  instance, stopped (the same three states), and answers an error whose body names it in
  ``new_contract`` (dstack ``vastai/api_client.py`` ``VastAICreateInstanceError``: "Vast.ai creates
  spot instances in the stopped state and returns an error if the bid is insufficient", cleaned up
  by its ``run_job``, PR dstackai/dstack#4036). The status and ``error`` code of that answer are
  not documented: ``failed_bid_status`` (400, or 200 with ``success: false``) and
  ``failed_bid_names_it`` cover the readings a client must survive.
- Listing: ``GET /api/v1/instances/`` answers one keyset page of at most 25 rows (``limit``
  default 25, max 25, ≤ 0 read as 5) with a ``next_token`` to pass as ``after_token`` for the
  next, null on the last; each page is one call under the endpoint's 1.0 s interval
  (vast-ai/docs @c6246226 ``api-reference/openapi/yaml/show_instances.yaml``; the SDK's
  ``api/instances.py`` ``show_instances`` follows ``next_token`` page after page with no pause).
- Without a key: the offer search (``POST /api/v0/bundles/``) answers a request with no
  ``Authorization`` header (its generated spec declares ``security: []``: vast-ai/docs @000751af
  ``api-reference/openapi/yaml/auto_post_api_v0_bundles_32b4bb.yaml``; dstackai/gpuhunt
  ``src/gpuhunt/providers/vastai.py`` posts to it with no credentials); everything else, renting
  included, answers 401 (``auto_put_api_v0_asks_id_6ec785.yaml``: ``BearerAuth``, 401 Unauthorized).
  A wrong key is refused on every endpoint. Keyless searches are rate-limited as one identity.
"""

from __future__ import annotations

import base64
import json
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.fakes.eviction import kill_container
from tests.fakes.http_server import FakeHandler, serving

OFFERS = [
    {"id": 1001, "machine_id": 501, "gpu_name": "H100 SXM", "num_gpus": 8, "cpu_cores_effective": 192,
     "dph_base": 16.8, "min_bid": 9.6, "storage_cost": 0.3, "reliability": 0.998, "cuda_max_good": 12.8,
     "hosting_type": 1},
    {"id": 1002, "machine_id": 502, "gpu_name": "H100 SXM", "num_gpus": 8, "cpu_cores_effective": 96,
     "dph_base": 14.9, "min_bid": 8.1, "storage_cost": 0.3, "reliability": 0.990, "cuda_max_good": 12.4,
     "hosting_type": 0},
    {"id": 1003, "machine_id": 503, "gpu_name": "H100 SXM", "num_gpus": 8, "cpu_cores_effective": 160,
     "dph_base": 12.0, "min_bid": 6.0, "storage_cost": 0.3, "reliability": 0.90, "cuda_max_good": 12.8,
     "hosting_type": 1},
    {"id": 2001, "machine_id": 601, "gpu_name": "cpu", "num_gpus": 1, "cpu_cores_effective": 2, "dph_base": 0.12,
     "min_bid": 0.05, "storage_cost": 0.12, "reliability": 0.999, "cuda_max_good": 12.8, "hosting_type": 1},
    {"id": 2002, "machine_id": 602, "gpu_name": "cpu", "num_gpus": 1, "cpu_cores_effective": 2, "dph_base": 0.11,
     "min_bid": 0.04, "storage_cost": 0.12, "reliability": 0.999, "cuda_max_good": 12.8, "hosting_type": 1},
    {"id": 2003, "machine_id": 603, "gpu_name": "cpu", "num_gpus": 2, "cpu_cores_effective": 2, "dph_base": 0.2,
     "min_bid": 0.08, "storage_cost": 0.12, "reliability": 0.999, "cuda_max_good": 12.8, "hosting_type": 1},
]
DEFAULTS = {"verified": True, "external": False, "rentable": True, "rented": False}
OPS = {"eq": lambda a, b: a == b, "neq": lambda a, b: a != b, "gte": lambda a, b: a >= b,
       "lte": lambda a, b: a <= b, "gt": lambda a, b: a > b, "lt": lambda a, b: a < b,
       "in": lambda a, b: a in b, "notin": lambda a, b: a not in b}
FILTERABLE = {"id", "machine_id", "gpu_name", "num_gpus", "cpu_cores_effective", "dph_total", "min_bid",
              "reliability", "cuda_max_good", "hosting_type", "storage_cost", "verified", "external", "rentable",
              "rented"}
"""Documented offer fields (a subset of vast.py ``offers_fields``); any other filter is ignored."""
HOURS_PER_MONTH = 24 * 30
PAGE_MAX = 25
"""Rows per page of ``GET /api/v1/instances/`` at most (openapi ``show_instances.yaml``: "max 25 per page")."""
RATE_LIMITS = {"search": 6.0, "create": 4.5, "show_instance": 2.0, "show_instances": 1.0, "destroy": 3.0}
"""Minimum seconds between two calls of one endpoint with one key (see the module doc)."""


class DestroyRefused(Exception):
    """A destroy answered 200 with ``success: false``: the openapi's 200 answer carries ``success``,
    "Whether the destruction was successful" (vast-ai/docs ``api-reference/openapi/yaml/destroy_instance.yaml``),
    and dstack reads a false one as a failure that would leave an orphan instance (dstackai/dstack
    154d70df2, ``vastai/api_client.py`` ``destroy_instance``). Its ``error`` code is not documented."""


def storage_per_hour(offer: dict[str, Any], gb: float) -> float:
    return float(offer["storage_cost"]) * gb / HOURS_PER_MONTH


class FakeVast:
    def __init__(self, api_key: str, ssh_port: int, authorized_keys: Path, workdir: Path, boot_s: float = 0.3,
                 rate_scale: float = 1.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        """What the rate limits are measured on (a test gives the client's limiter the same clock)."""
        self.api_key, self.ssh_port, self.authorized_keys, self.workdir = api_key, ssh_port, authorized_keys, workdir
        self.boot_s = boot_s
        self.proxy_port = ssh_port
        """Where the "proxy" (``ssh_host``/``ssh_port``) answers; the same sshd unless a test says otherwise."""
        self.direct_port = ssh_port
        """Where the direct mapping (``ports["22/tcp"]``) points."""
        self.offers = {o["id"]: {**DEFAULTS, **o} for o in OFFERS}
        self.instances: dict[int, dict[str, Any]] = {}
        self.faults: list[str] = []
        self.rent_bodies: list[dict[str, Any]] = []
        self.container_keys: dict[int, str] = {}
        """Each instance's own ``CONTAINER_API_KEY`` (in its container, never in the API's answers)."""
        self.unschedulable: set[int] = set()
        """Offers whose machine cannot start an instance now (see the module doc)."""
        self.destroy_refused = 0
        """How many of the next destroys answer 200 ``{"success": false}`` and destroy nothing."""
        self.failed_bid_status = 400
        """The HTTP status of a rent whose bid lost (the body says ``success: false`` either way)."""
        self.failed_bid_names_it = True
        """Whether that answer carries the stopped instance's id (``new_contract``)."""
        self.rate_limits = {k: v * rate_scale for k, v in RATE_LIMITS.items()}
        self.calls: Counter[str] = Counter()
        """Calls per endpoint that were answered (not refused by the rate limit)."""
        self.throttled: Counter[str] = Counter()
        """429s for calls that came too soon, per endpoint."""
        self._last: dict[tuple[str, str], float] = {}
        self.lock = threading.Lock()
        self._next = 7000

    def admit(self, key: str, endpoint: str) -> float | None:
        """None when a call of ``endpoint`` with ``key`` may run now; else the threshold it broke."""
        interval = self.rate_limits.get(endpoint)
        with self.lock:
            now = self.clock()
            last = self._last.get((key, endpoint))
            if interval and last is not None and now - last < interval:
                self.throttled[endpoint] += 1
                return interval
            self._last[(key, endpoint)] = now
            self.calls[endpoint] += 1
            return None

    def search(self, q: dict[str, Any]) -> list[dict[str, Any]]:
        wanted = "bid" if q.get("type") == "bid" else "on-demand"
        storage = float(q.get("allocated_storage", 5.0))
        filters = {k: v for k, v in q.items() if k in FILTERABLE}
        found = []
        for offer in self.offers.values():
            row = {**offer, "type": wanted, "dph_total": round(offer["dph_base"] + storage_per_hour(offer, storage), 6)}
            if all(isinstance(cond, dict) and all(op in OPS and OPS[op](row[field], value)
                                                  for op, value in cond.items())
                   for field, cond in filters.items()):
                found.append(row)
        for field, direction in reversed(q.get("order") or []):
            found.sort(key=lambda o, f=field: o.get(f, 0), reverse=direction == "desc")
        return found[: int(q["limit"])] if q.get("limit") else found

    def rent(self, offer_id: int, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self.lock:
            offer = self.offers.get(offer_id)
            if offer is None:
                return 404, {"success": False, "error": "invalid_args", "ask_id": offer_id,
                             "msg": f"error 404/3603: no_such_ask Instance type by id {offer_id} is not available."}
            waits = offer["rented"] or offer_id in self.unschedulable
            if waits and body.get("cancel_unavail"):
                return 410, {"success": False, "error": "no_such_ask", "ask_id": offer_id,
                             "msg": f"error 410/3907: no_such_ask Instance type {offer_id} is no longer available."}
            bid = body.get("price")
            lost = not waits and bid is not None and bid < offer["min_bid"]
            offer["rented"] = offer["rented"] or not (lost or waits)
            self._next += 1
            self.rent_bodies.append(body)
            price = bid if bid is not None else offer["dph_base"]
            state = "stopped" if lost else "running"
            self.instances[self._next] = {
                "id": self._next, "label": body.get("label"), "machine_id": offer["machine_id"],
                "is_bid": bid is not None, "dph_total": price + storage_per_hour(offer, float(body.get("disk", 10))),
                "intended_status": state, "cur_state": "stopped" if waits else state,
                "next_state": "stopped" if waits else state, "actual_status": None if lost or waits else "loading",
                "created": time.time(), "offer": offer_id, "gpu_name": offer["gpu_name"],
                "num_gpus": offer["num_gpus"], "cpu_cores_effective": offer["cpu_cores_effective"],
                "image_uuid": body.get("image"), "start_date": time.time(),
                "extra_env": [[k, v] for k, v in (body.get("env") or {}).items()]}
            self.container_keys[self._next] = uuid.uuid4().hex
            if lost:  # created all the same, stopped, billing its disk (see the module doc)
                answer = {"success": False, "error": "invalid_price", "msg": f"bid below min_bid {offer['min_bid']}"}
                return self.failed_bid_status, {**answer, **({"new_contract": self._next}
                                                             if self.failed_bid_names_it else {})}
            return 200, {"success": True, "new_contract": self._next}

    def view(self, instance: dict[str, Any]) -> dict[str, Any]:
        row = dict(instance)
        if row["actual_status"] == "loading" and time.time() - row["created"] >= self.boot_s:
            instance["actual_status"] = row["actual_status"] = "running"
        up = row["actual_status"] == "running"
        row.update(ssh_host="127.0.0.1" if up else None, ssh_port=self.proxy_port if up else None,
                   public_ipaddr="127.0.0.1" if up else None,
                   ports={"22/tcp": [{"HostIp": "0.0.0.0", "HostPort": str(self.direct_port)}]} if up else {})
        return row

    def listing(self, select_filters: dict[str, Any], limit: int = PAGE_MAX,
                after_token: str | None = None) -> tuple[list[dict[str, Any]], str | None]:
        """``GET /api/v1/instances/``: one page of rows in id order and the ``next_token`` (None on
        the last page); ``select_filters`` on ``label`` (openapi.yaml: filterable columns). A page
        holds ``limit`` rows, at most ``PAGE_MAX`` (≤ 0: 5); ``after_token`` is the keyset cursor
        of the page before (``ValueError``: not one of ours, a 400)."""
        wanted = (select_filters.get("label") or {}).get("eq")
        size = PAGE_MAX if limit > PAGE_MAX else (5 if limit <= 0 else limit)
        after = int(json.loads(base64.b64decode(after_token))["values"]["id"]) if after_token else -1
        with self.lock:
            rows = [self.view(i) for key, i in sorted(self.instances.items())
                    if key > after and (wanted is None or i["label"] == wanted)]
        page = rows[:size]
        more = len(rows) > size
        token = base64.b64encode(json.dumps({"values": {"id": page[-1]["id"]}}).encode()).decode() if more else None
        return page, token

    def add_instance(self, label: str, **fields: Any) -> int:
        """An instance the account holds already (made elsewhere: the console, another tool)."""
        with self.lock:
            self._next += 1
            self.instances[self._next] = {
                "id": self._next, "label": label, "machine_id": 900, "is_bid": False, "dph_total": 0.5,
                "intended_status": "running", "actual_status": "running", "cur_state": "running",
                "next_state": "running", "created": time.time(), "offer": None, "gpu_name": "cpu", "num_gpus": 1,
                "cpu_cores_effective": 2, "image_uuid": "img", "start_date": time.time(), "extra_env": [],
                **fields}
            return self._next

    def destroy(self, instance_id: int) -> bool:
        with self.lock:
            if self.destroy_refused:
                self.destroy_refused -= 1
                raise DestroyRefused
            instance = self.instances.pop(instance_id, None)
            if instance is not None and instance["offer"] in self.offers:
                self.offers[instance["offer"]]["rented"] = False
            return instance is not None

    def outbid(self, instance_id: int) -> None:
        """Another renter outbid ours: the instance is stopped (``cur_state``, ``intended_status`` and
        ``next_state`` all ``stopped``), its processes die, its disk still bills."""
        with self.lock:
            instance = self.instances[instance_id]
            instance.update(actual_status="stopped", cur_state="stopped", intended_status="stopped",
                            next_state="stopped")
        kill_container(self.workdir, str(instance["label"]).rsplit("--", 1)[-1])

    def set_status(self, instance_id: int, actual: str | None, **fields: Any) -> None:
        """What the host reports now (``running`` again: an outbid instance resumed by itself)."""
        with self.lock:
            self.instances[instance_id].update(actual_status=actual, **fields)

    def key_for(self, authorization: str, method: str, path: list[str]) -> str:
        """The key a request must carry: the account's, or an instance's own ``CONTAINER_API_KEY``
        for that instance's GET and DELETE (anything else with it is refused as a wrong key)."""
        with self.lock:
            own = next((i for i, k in self.container_keys.items() if authorization == f"Bearer {k}"), None)
        if own is not None and method in ("GET", "DELETE") and path == ["api", "v0", "instances", str(own)]:
            return self.container_keys[own]
        return self.api_key

    def container_environ(self, instance_id: int) -> bytes:
        """The instance's container environment as its PID 1 has it (``/proc/1/environ``)."""
        with self.lock:
            key = self.container_keys[instance_id]
        return f"PATH=/usr/bin\0CONTAINER_API_KEY={key}\0CONTAINER_ID={instance_id}\0GPU_COUNT=1\0".encode()

    def inventory(self) -> list[int]:
        with self.lock:
            return sorted(self.instances)


def _endpoint(method: str, path: list[str]) -> str:
    if path == ["api", "v0", "bundles"]:
        return "search"
    if method == "PUT" and path[:3] == ["api", "v0", "asks"]:
        return "create"
    if path == ["api", "v1", "instances"]:
        return "show_instances"
    if path[:3] == ["api", "v0", "instances"] and len(path) == 4:
        return {"GET": "show_instance", "DELETE": "destroy"}.get(method, method)
    return "/".join(path[:3] + path[4:])


@contextmanager
def running_fake_vast(fake: FakeVast) -> Iterator[str]:
    """Serve ``fake`` on 127.0.0.1; yields the server URL for ``VAST_URL``."""

    class Handler(FakeHandler):
        def _body(self) -> dict[str, Any]:
            raw = self.rfile.read(int(self.headers.get("Content-Length", 0)) or 0)
            return json.loads(raw) if raw else {}

        def _handle(self, method: str) -> None:
            body = self._body()
            parts = urlsplit(self.path)
            path = [p for p in parts.path.split("/") if p]
            endpoint = _endpoint(method, path)
            if endpoint == "search" and fake.faults[:1] == ["quota"]:
                fake.faults.pop(0)
                self.send_body(429, json.dumps({"success": False, "error": "search_quota_exceeded",
                                                "msg": "Daily search quota exceeded."}).encode())
                return
            slow_create = endpoint == "create" and fake.faults[:1] == ["slow_create"]
            if slow_create:
                fake.faults.pop(0)
            elif self.answer_fault(fake.faults, fake.key_for(self.headers.get("Authorization", ""), method, path),
                                   b'{"offers": [',
                                   b'{"success": false, "error": "invalid_user_key"}', public=endpoint == "search"):
                return
            threshold = fake.admit(self.headers.get("Authorization", ""), endpoint)
            if threshold is not None:
                self.send_body(429, f"API requests too frequent endpoint threshold={threshold}".encode(), "text/plain")
                return
            code, answer = self._route(method, path, body, parse_qs(parts.query))
            if slow_create:
                time.sleep(1.5)  # created, but the answer comes after the client gave up
            self.send_body(code, json.dumps(answer).encode(), "application/json")

        def _route(self, method: str, path: list[str], body: dict, query: dict) -> tuple[int, Any]:
            if method == "POST" and path == ["api", "v0", "bundles"]:
                return 200, {"offers": fake.search(body)}
            if method == "PUT" and path[:3] == ["api", "v0", "asks"]:
                return fake.rent(int(path[3]), body)
            if method == "GET" and path == ["api", "v1", "instances"]:
                filters = json.loads(query.get("select_filters", ["{}"])[0])
                try:
                    rows, token = fake.listing(filters, int(query.get("limit", [PAGE_MAX])[0]),
                                               query.get("after_token", [None])[0])
                except (ValueError, KeyError):
                    return 400, {"success": False, "error": "invalid_token", "msg": "bad after_token"}
                return 200, {"success": True, "instances_found": len(rows), "instances": rows, "next_token": token}
            if path[:3] == ["api", "v0", "instances"] and len(path) >= 4:
                instance_id = int(path[3])
                if method == "GET":
                    with fake.lock:
                        instance = fake.instances.get(instance_id)
                        return 200, {"instances": fake.view(instance) if instance else None}
                if method == "DELETE":
                    try:
                        found = fake.destroy(instance_id)
                    except DestroyRefused:
                        return 200, {"success": False, "error": "internal_error", "msg": "could not destroy"}
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


@contextmanager
def ssh_banner(banner: bool = True) -> Iterator[int]:
    """A listener on 127.0.0.1 (yields its port) that greets with an SSH banner, or, with
    ``banner=False``, accepts and says nothing: a direct port that connects but never answers."""
    import socket

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    held: list[socket.socket] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            held.append(conn)
            if banner:
                conn.sendall(b"SSH-2.0-fake\r\n")

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield server.getsockname()[1]
    finally:
        server.close()
        for conn in held:
            conn.close()
