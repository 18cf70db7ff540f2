"""moto's EC2 on 127.0.0.1 for the ``aws`` provider: boto3 reaches it through ``AWS_ENDPOINT_URL``.

moto's server runs in a thread of the test process, so the fake can adjust moto's backend:

- EC2 behaviours moto lacks: ``run_instances`` honours ``ClientToken`` (the same token answers the
  same reservation, as EC2 does), and spot prices per instance type and zone (``spot_prices``;
  moto answers 0.00001 everywhere);
- nodes on the test's sshd: each instance's public IP is 127.0.0.1, and its key pair's public key
  is authorized on that sshd at launch;
- two Amazon-owned Deep Learning AMIs with today's name pattern, an older and a newer, in
  us-east-1 and us-west-2;
- validation moto does only when asked: unknown AMIs and key pairs are refused;
- ``spot_terminate(id)``: EC2 reclaims a spot instance (terminated, state reason
  ``Server.SpotInstanceTermination``) and every process of the node dies, as they do when
  ``terminate_instances`` ends one (a payload never outlives its instance on the shared sshd);
- ``live()``: instances still pending or running (a test ends with none); terminating an
  instance again is a no-op, as at EC2 (moto would delete its launch-made interfaces twice);
- placement groups (``placement``), which moto lacks: ``aws_placement``;
- AWS's Price List Query API (``pricing``), which moto lacks: ``aws_pricing_fake`` (no answer set:
  nothing matches, so on-demand offers are at the table's price);
- capacity reservations and Capacity Blocks (``reservations``), which moto lacks: ``aws_reservations``;
- the region's Elastic IP quota (``address_limit``, default 5: the default of the Service Quotas entry
  "EC2-VPC Elastic IPs", L-0263D0A3, and what moto's ``describe_account_attributes`` answers for
  ``vpc-max-elastic-ips``), which moto does not enforce: ``allocate_address`` past it answers EC2's
  ``AddressLimitExceeded``, HTTP 400, "The maximum number of addresses has been reached." (the code
  and text of real refusals quoted in github.com/opstrace/opstrace/issues/273 and
  openshift/managed-notifications#15; docs.aws.amazon.com/AWSEC2/latest/APIReference/errors-overview.html
  lists the code);
- ``refuse(code, zone)``: ``run_instances`` in that zone (None: every zone) answers EC2's error
  for ``code`` instead of launching, on the wire as EC2 sends it (``Response/Errors/Error`` XML with
  ``Code`` and ``Message``, docs.aws.amazon.com/AWSEC2/latest/APIReference/errors-overview.html);
  the capacity shortages ``InsufficientInstanceCapacity``/``InsufficientCapacity`` are server
  errors there, HTTP 500 (a real one reads ``statusCode: 500, retryable: true`` in
  github.com/nib-health-funds/hammertime/issues/29, and botocore re-sends it: "(reached max
  retries: 4)" in github.com/ansible-collections/amazon.aws/issues/1038, whose message is the
  one below); the others are client errors, HTTP 400. moto never refuses a launch.
  ``refused`` lists each refusal as (zone, code);
- ``FakeIMDS`` / ``running_fake_imds``: a node's instance metadata service (IMDSv2) as far as the
  payload's spot watch reads it: ``PUT /latest/api/token`` with ``X-aws-ec2-metadata-token-ttl-seconds``
  gives a token (no TTL header: 400); ``GET /latest/meta-data/spot/instance-action`` without a valid
  token: 401; before the notice: 404; after ``notify()``: 200 with ``{"action": "terminate", "time":
  ...}`` (docs.aws.amazon.com/AWSEC2/latest/UserGuide/spot-instance-termination-notices.html and
  .../instance-metadata-v2-how-it-works.html). ``expire_tokens()`` makes every token 401 (expired);
- the account has ``ENABLED_REGIONS`` only (``describe_regions``), as an account with few regions
  opted in: moto builds a backend per region on first use, seconds each, and the provider's
  ``owned`` scans every enabled region;
- moto's own catalogue of public AMIs is not loaded (``MOTO_EC2_LOAD_DEFAULT_AMIS=false``: moto's
  setting, read in ``moto/settings.py`` ``ec2_load_default_amis`` and ``moto/ec2/models/amis.py`` ``_load_amis``):
  the provider only looks up the fake's images, and moto otherwise builds ~1,300 AMIs with their
  volumes and snapshots for each region backend of each test (most of an AWS test's CPU);
- while it runs, every botocore session of this process shares one data loader (``_shared_loader``):
  the EC2 model and the endpoint rules are parsed once per process, not once per session the
  provider opens (about a second of CPU each). botocore already hands the same parsed model to
  every client of one session (``botocore/loaders.py``, ``instance_cache``); sessions share it here.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime
from functools import partialmethod
from pathlib import Path
from typing import Any
from unittest import mock

from tests.fakes.aws_placement import PlacementGroups, serving_placement_groups
from tests.fakes.aws_pricing_fake import FakePricing, serving_pricing
from tests.fakes.aws_reservations import Reservations, serving_reservations
from tests.fakes.eviction import kill_container
from tests.fakes.http_server import FakeHandler, serving

REGION = "us-east-1"
OTHER_REGION = "us-west-2"
AMAZON = "898082745236"
DLAMI = "Deep Learning OSS Nvidia Driver AMI GPU PyTorch 2.7 (Ubuntu 22.04) {}"
SPOT_PRICES = {("c5.large", "us-east-1a"): 0.041, ("c5.large", "us-east-1b"): 0.033,
               ("c5.large", "us-east-1c"): 0.052, ("p5.48xlarge", "us-east-1a"): 31.4,
               ("p5.48xlarge", "us-east-1d"): 29.9}
SPOT_REASON = "Server.SpotInstanceTermination"
ENABLED_REGIONS = (REGION, OTHER_REGION, "eu-west-1")
SERVER_ERRORS = ("InsufficientInstanceCapacity", "InsufficientCapacity")
REFUSALS = {  # the messages EC2 sends with each code (as quoted in the issues cited in the module doc)
    "InsufficientInstanceCapacity": "We currently do not have sufficient {itype} capacity in the Availability Zone "
                                    "you requested ({zone}). Our system will be working on provisioning additional "
                                    "capacity.",
    "UnfulfillableCapacity": "There is no Spot capacity available that matches your request.",
    "MaxSpotInstanceCountExceeded": "Max spot instance count exceeded",
    "VcpuLimitExceeded": "You have requested more vCPU capacity than your current vCPU limit of 0 allows for the "
                         "instance bucket that the specified instance type belongs to. Please visit "
                         "http://aws.amazon.com/contact-us/ec2-request to request an adjustment to this limit.",
}
ERROR_XML = ('<?xml version="1.0" encoding="UTF-8"?>\n<Response><Errors><Error><Code>{code}</Code>'
             '<Message>{message}</Message></Error></Errors><RequestID>{request}</RequestID></Response>')


class FakeAWS:
    def __init__(self, authorized_keys: Path, workdir: Path) -> None:
        self.authorized_keys, self.workdir = authorized_keys, workdir
        self.spot_prices = dict(SPOT_PRICES)
        self.instances: dict[str, Any] = {}
        """moto's instance objects, by id, as launched through ``run_instances``."""
        self.requests: list[dict[str, Any]] = []
        """What ``run_instances`` received, as moto parsed it (one per call, repeats included)."""
        self.tokens: dict[str, str] = {}
        self.images: dict[str, list[str]] = {}
        """Region → the DLAMI ids the fake added there, oldest first."""
        self.refusals: dict[str | None, str] = {}
        """Zone (None: every zone) → the error code ``run_instances`` answers there."""
        self.refused: list[tuple[str, str]] = []
        self.lock = threading.RLock()
        self._by_token: dict[str, Any] = {}
        self.placement = PlacementGroups()
        """Placement groups, which moto lacks (``aws_placement``)."""
        self.reservations = Reservations()
        """Capacity reservations and Capacity Blocks, which moto lacks (``aws_reservations``)."""
        self.address_limit = 5
        """Elastic IPs a region may hold (see the module doc)."""
        self.pricing = FakePricing()
        """AWS's Price List Query API, which moto lacks (``aws_pricing_fake``)."""

    def backend(self, region: str = REGION) -> Any:
        from moto.core import DEFAULT_ACCOUNT_ID
        from moto.ec2.models import ec2_backends

        return ec2_backends[DEFAULT_ACCOUNT_ID][region]

    def add_images(self, region: str = REGION) -> None:
        """An older and a newer Deep Learning AMI owned by Amazon, in ``region``."""
        for stamp in ("20250301", "20251015"):
            ami = self.backend(region).register_image(name=DLAMI.format(stamp), description="Deep Learning AMI")
            ami.owner_id, ami.owner_alias = AMAZON, "amazon"
            ami.creation_date = datetime.strptime(stamp, "%Y%m%d").replace(tzinfo=UTC)
            self.images.setdefault(region, []).append(ami.id)

    def run_instances(self, original: Any, backend: Any, *args: Any, **kwargs: Any) -> Any:
        token = kwargs.get("client_token")
        with self.lock:
            self.requests.append(dict(kwargs))
            if token and token != "ABCDE" and token in self._by_token:  # moto's stand-in when none was sent
                return self._by_token[token]
            reservation = original(backend, *args, **kwargs)
            for instance in reservation.instances:
                instance.nics[0].public_ip = "127.0.0.1"
                self.instances[instance.id] = instance
                self.tokens[instance.id] = str(token)
                if kwargs.get("key_name"):
                    public = backend.key_pairs[kwargs["key_name"]].material_public
                    with self.authorized_keys.open("a") as keys:
                        keys.write((public.decode() if isinstance(public, bytes) else str(public)).strip() + "\n")
            self._by_token[str(token)] = reservation
            return reservation

    def refuse(self, code: str, zone: str | None = None) -> None:
        """From now on ``run_instances`` in ``zone`` (None: anywhere) fails with EC2's ``code``."""
        with self.lock:
            self.refusals[zone] = code

    def refusal(self, original: Any, response: Any) -> Any:
        """moto's RunInstances response, or EC2's error when the request's zone is refused."""
        zone = str(response._get_param("Placement.AvailabilityZone") or "")
        with self.lock:
            code = self.refusals.get(zone) or self.refusals.get(None)
            if code is None:
                return original(response)
            self.refused.append((zone, code))
        itype = str(response._get_param("InstanceType"))
        message = REFUSALS.get(code, code).format(itype=itype, zone=zone)
        body = ERROR_XML.format(code=code, message=message, request="11111111-2222-3333-4444-555555555555")
        return body, {"status": 500 if code in SERVER_ERRORS else 400}

    def allocate_address(self, original: Any, response: Any) -> Any:
        """moto's AllocateAddress, or EC2's refusal once the region holds ``address_limit`` addresses."""
        with self.lock:
            if len(self.backend(response.region).addresses) < self.address_limit:
                return original(response)
        body = ERROR_XML.format(code="AddressLimitExceeded",
                                message="The maximum number of addresses has been reached.",
                                request="11111111-2222-3333-4444-555555555555")
        return body, {"status": 400}

    def terminate_instances(self, original: Any, backend: Any, instance_ids: list[str]) -> Any:
        for instance_id in instance_ids:  # ending an ended instance is a no-op at EC2; moto would delete
            instance = self.instances.get(instance_id)  # its interfaces again and fail on the first
            if instance is not None and instance.state == "terminated":
                for nic in instance.nics.values():
                    nic.delete_on_termination = False
        ended = original(backend, instance_ids)
        for instance_id in instance_ids:
            if instance_id in self.tokens:
                kill_container(self.workdir, self.tokens[instance_id])
        return ended

    def price_history(self, response: Any) -> Any:
        from moto.core.responses import ActionResult

        wanted = set(response._get_param("InstanceTypes", []))
        history = [{"InstanceType": itype, "ProductDescription": "Linux/UNIX", "SpotPrice": f"{price:.4f}",
                    "AvailabilityZone": zone, "Timestamp": "2026-01-02T15:04:05.000Z"}
                   for (itype, zone), price in sorted(self.spot_prices.items()) if not wanted or itype in wanted]
        stale = [{**row, "SpotPrice": "99.0000", "Timestamp": "2025-01-02T15:04:05.000Z"} for row in history]
        return ActionResult({"SpotPriceHistory": stale + history})  # older rows first: the newest must win

    def spot_terminate(self, instance_id: str) -> None:
        """EC2 reclaims the spot instance: it ends at once and its processes die."""
        from moto.ec2.models.instances import StateReason

        with self.lock:
            instance = self.instances[instance_id]
            instance.terminate()
            instance.state_reason = StateReason(f"{SPOT_REASON}: Spot instance termination", SPOT_REASON)
        kill_container(self.workdir, self.tokens[instance_id])

    def live(self) -> list[str]:
        with self.lock:
            return sorted(i for i, inst in self.instances.items() if inst.state in ("pending", "running"))


_LOADERS: dict[str | None, Any] = {}


def _shared_loader(search_path_string: str | None = None) -> Any:
    """``botocore.loaders.create_loader``, one loader per search path for the whole process."""
    from botocore.loaders import create_loader

    if search_path_string not in _LOADERS:
        _LOADERS[search_path_string] = create_loader(search_path_string)
    return _LOADERS[search_path_string]


@contextmanager
def running_fake_aws(fake: FakeAWS) -> Iterator[str]:
    """Serve moto's EC2 on 127.0.0.1 with the fake's additions; yields the URL for ``AWS_ENDPOINT_URL``.

    Sets fake credentials and the region in this process's environment while it runs (the SDK and
    subprocesses read them there)."""
    import botocore.session
    from moto import settings as moto_settings
    from moto.ec2.models import ec2_backends
    from moto.ec2.models.availability_zones_and_regions import RegionsAndZonesBackend
    from moto.ec2.models.instances import InstanceBackend
    from moto.ec2.responses.elastic_ip_addresses import ElasticIPAddresses
    from moto.ec2.responses.instances import InstanceResponse
    from moto.ec2.responses.spot_instances import SpotInstances
    from moto.server import ThreadedMotoServer
    from werkzeug.serving import BaseWSGIServer

    original_run, original_terminate = InstanceBackend.run_instances, InstanceBackend.terminate_instances

    def run_instances(backend: Any, *args: Any, **kwargs: Any) -> Any:
        return fake.run_instances(original_run, backend, *args, **kwargs)

    def terminate_instances(backend: Any, instance_ids: list[str]) -> Any:
        return fake.terminate_instances(original_terminate, backend, instance_ids)

    original_response = InstanceResponse.run_instances

    def run_instances_response(response: Any) -> Any:
        return fake.refusal(original_response, response)

    original_allocate = ElasticIPAddresses.allocate_address

    def allocate_address(response: Any) -> Any:
        return fake.allocate_address(original_allocate, response)

    original_regions = RegionsAndZonesBackend.describe_regions

    def describe_regions(backend: Any, region_names: list[str] | None = None) -> Any:
        return [r for r in original_regions(backend, region_names) if r.name in ENABLED_REGIONS]

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    with ExitStack() as stack:
        werkzeug = logging.getLogger("werkzeug")  # moto's server logs every request otherwise
        stack.callback(werkzeug.setLevel, werkzeug.level)
        werkzeug.setLevel(logging.WARNING)
        stack.enter_context(mock.patch.dict(os.environ))  # restored as it was at the end
        os.environ.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION=REGION,
                          AWS_EC2_METADATA_DISABLED="true", MOTO_EC2_LOAD_DEFAULT_AMIS="false")
        for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE"):
            os.environ.pop(name, None)
        stack.enter_context(mock.patch.object(moto_settings, "ENABLE_AMI_VALIDATION", True))
        stack.enter_context(mock.patch.object(moto_settings, "ENABLE_KEYPAIR_VALIDATION", True))
        stack.enter_context(mock.patch.object(InstanceBackend, "run_instances", run_instances))
        stack.enter_context(mock.patch.object(InstanceBackend, "terminate_instances", terminate_instances))
        stack.enter_context(mock.patch.object(InstanceResponse, "run_instances", run_instances_response))
        stack.enter_context(mock.patch.object(RegionsAndZonesBackend, "describe_regions", describe_regions))
        stack.enter_context(mock.patch.object(ElasticIPAddresses, "allocate_address", allocate_address))
        stack.enter_context(serving_placement_groups(fake.placement))
        stack.enter_context(serving_reservations(fake.reservations))
        stack.enter_context(mock.patch.object(SpotInstances, "describe_spot_price_history",
                                              lambda response: fake.price_history(response)))
        ec2_backends.reset()  # moto's state lives in this process: each fake starts from an empty account
        stack.enter_context(mock.patch.object(botocore.session, "create_loader", _shared_loader))
        # werkzeug's serve_forever checks for shutdown every 0.5 s by default (werkzeug/serving.py,
        # BaseWSGIServer.serve_forever): at 20 ms, server.stop() takes milliseconds, not up to 0.5 s a test.
        stack.enter_context(mock.patch.object(BaseWSGIServer, "serve_forever", partialmethod(
            BaseWSGIServer.serve_forever, poll_interval=0.02)))
        server.start()
        stack.callback(server.stop)
        host, port = server.get_host_and_port()
        url = f"http://{host}:{port}"
        os.environ["AWS_ENDPOINT_URL"] = url
        stack.enter_context(serving_pricing(fake.pricing))
        for region in (REGION, OTHER_REGION):
            fake.add_images(region)
        yield url


class FakeIMDS:
    """The spot notice as a node's metadata service serves it (see the module doc)."""

    def __init__(self) -> None:
        self.notice: dict[str, str] | None = None
        self.tokens: set[str] = set()
        self.requests: list[tuple[str, str]] = []
        self.lock = threading.Lock()

    def notify(self, action: str = "terminate", when: str = "2026-11-23T13:02:00Z") -> None:
        with self.lock:
            self.notice = {"action": action, "time": when}

    def clear(self) -> None:
        """The notice is gone (a new instance answers the same endpoint)."""
        with self.lock:
            self.notice = None

    def expire_tokens(self) -> None:
        with self.lock:
            self.tokens.clear()


@contextmanager
def running_fake_imds(imds: FakeIMDS) -> Iterator[str]:
    """Serve ``imds`` on 127.0.0.1; yields the endpoint (for ``AWS_EC2_METADATA_SERVICE_ENDPOINT``)."""
    import json
    import uuid

    class Handler(FakeHandler):
        def do_PUT(self) -> None:
            imds.requests.append(("PUT", self.path))
            if self.path != "/latest/api/token" or not self.headers.get("X-aws-ec2-metadata-token-ttl-seconds"):
                self.send_body(400, b"", "text/plain")
                return
            token = uuid.uuid4().hex
            with imds.lock:
                imds.tokens.add(token)
            self.send_body(200, token.encode(), "text/plain")

        def do_GET(self) -> None:
            imds.requests.append(("GET", self.path))
            with imds.lock:
                valid, notice = self.headers.get("X-aws-ec2-metadata-token") in imds.tokens, imds.notice
            if not valid:
                self.send_body(401, b"", "text/plain")
            elif self.path != "/latest/meta-data/spot/instance-action" or notice is None:
                self.send_body(404, b"<?xml version=\"1.0\"?><title>404 - Not Found</title>", "text/html")
            else:
                self.send_body(200, json.dumps(notice).encode(), "text/plain")

    with serving(Handler) as url:
        yield url
