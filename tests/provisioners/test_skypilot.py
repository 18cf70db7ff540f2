"""The skypilot provider: tasks validated by SkyPilot's real schema (offline), and the launch /
status / down path through the SDK stand-in, with SSH over the real sshd via the cluster's alias."""

from __future__ import annotations

import concurrent.futures
import time
from pathlib import Path
from typing import Any

import pytest
import requests

from benchctl.provisioners.base import NoCapacity, Node, NodeState, OfferRequest, ProviderError
from benchctl.provisioners.skypilot.provider import SkyPilotProvider, SkyPilotSettings, cluster_state
from benchctl.provisioners.skypilot.task import task_config, validate
from tests.fakes.skypilot_standin import SkyPilotStandIn

pytestmark = pytest.mark.usefixtures("sky_home")


def _provider(tmp_path: Path, sky: SkyPilotStandIn, sleeps: list[float] | None = None) -> SkyPilotProvider:
    """The provider on the stand-in; its retry back-off waits go to ``sleeps`` (none of them real)."""
    provider = SkyPilotProvider(tmp_path / "skypilot", SkyPilotSettings(workdir=str(tmp_path / "work")), client=sky)
    provider.sleep = (sleeps if sleeps is not None else []).append
    return provider


def _request(**kw: object) -> OfferRequest:
    base: dict[str, object] = {"gpu": "H100_SXM", "count": 8, "market": "on-demand", "label": "cellA",
                               "extra": {"cloud": "lambda"}}
    return OfferRequest(**{**base, **kw})  # type: ignore[arg-type]


def resources_of(task: Any) -> dict[str, Any]:
    """What SkyPilot parsed, read from its Resources (``to_yaml_config`` would consult the catalog)."""
    (r,) = task.resources
    parsed = {"cloud": str(r.cloud).lower(), "region": r.region, "use_spot": r.use_spot,
              "instance_type": r.instance_type, "image_id": r.image_id, "disk_size": r.disk_size}
    if r.instance_type is None:  # with an instance type, these come from the catalog
        parsed.update(accelerators=r.accelerators, cpus=r.cpus)
    return parsed


@pytest.mark.parametrize(("request_kw", "resources"), [
    ({}, {"cloud": "lambda", "accelerators": {"H100": 8}, "use_spot": False, "region": None}),
    ({"market": "spot", "region": "us-central1", "extra": {"cloud": "gcp"}},
     {"cloud": "gcp", "accelerators": {"H100": 8}, "use_spot": True, "region": "us-central1"}),
    ({"gpu": "", "instance_type": "p5.48xlarge", "region": "us-east-1", "extra": {"cloud": "aws"}},
     {"cloud": "aws", "instance_type": "p5.48xlarge", "region": "us-east-1", "use_spot": False}),
    ({"gpu": "A100_SXM", "min_vcpus": 96, "image": "pytorch/pytorch:2.8.0"},
     {"accelerators": {"A100-80GB": 8}, "cpus": "96+", "image_id": {None: "docker:pytorch/pytorch:2.8.0"}}),
])
def test_generated_tasks_validate_with_skypilots_schema(request_kw: dict[str, object],
                                                        resources: dict[str, object]) -> None:
    config = task_config(_request(**request_kw), "bc-x--bc-1", disk_size=512)
    parsed = resources_of(validate(config, "cellA"))
    for key, value in resources.items():
        assert parsed[key] == value, (key, parsed)
    assert parsed["disk_size"] == 512
    assert set(config) == {"name", "resources"}, "no run, setup, envs or secrets in the task"


def test_resources_skypilot_refuses_are_an_error_naming_the_cell() -> None:
    with pytest.raises(ProviderError, match=r"^cellA: SkyPilot refuses the cell's resources: .*lamda"):
        validate(task_config(_request(extra={"cloud": "lamda"}), "t", 256), "cellA")
    with pytest.raises(ProviderError, match=r"^cellB: SkyPilot refuses the cell.s resources: .*memory size"):
        validate(task_config(_request(gpu="H100:x", label="cellB"), "t", 256), "cellB")


@pytest.mark.parametrize(("request_state", "cluster", "spot", "downed", "expected"), [
    ("RUNNING", None, True, False, NodeState.STARTING),
    ("PENDING", "INIT", False, False, NodeState.STARTING),
    ("SUCCEEDED", "UP", True, False, NodeState.RUNNING),
    (None, "UP", False, False, NodeState.RUNNING),
    ("SUCCEEDED", None, True, False, NodeState.PREEMPTED),
    ("SUCCEEDED", "STOPPED", True, False, NodeState.PREEMPTED),
    ("SUCCEEDED", None, False, False, NodeState.TERMINATED),
    ("SUCCEEDED", None, True, True, NodeState.TERMINATED),
    ("FAILED", None, True, False, NodeState.TERMINATED),
    ("SUCCEEDED", "INIT", True, False, NodeState.STARTING),  # a launch under way (an unhealthy one raises)
    ("SUCCEEDED", "SOMETHING_NEW", False, False, NodeState.UNKNOWN),
])
def test_cluster_states(request_state: str | None, cluster: str | None, spot: bool, downed: bool,
                        expected: NodeState) -> None:
    assert cluster_state(request_state, cluster, spot, downed) is expected


def test_offers_priced_from_the_catalog(standin: SkyPilotStandIn, tmp_path: Path) -> None:
    provider = _provider(tmp_path, standin)
    (offer,) = provider.offers(_request())
    assert (offer.offer_id, offer.hourly_usd) == ("lambda:gpu_8x_h100_sxm5", 23.92)
    assert offer.details["task"]["resources"]["instance_type"] == "gpu_8x_h100_sxm5", "what was priced is launched"
    assert provider.offers(_request(extra={"cloud": "gcp"})) == [], "no on-demand H100 on GCP in the catalog: no offer"
    with pytest.raises(ProviderError, match="cellA: skypilot cells need `cloud`"):
        provider.offers(_request(extra={}))


def test_a_pinned_instance_type_asks_for_its_own_gpu_name(standin: SkyPilotStandIn, tmp_path: Path) -> None:
    # GCP's a3-megagpu-8g carries "H100-MEGA:8": SkyPilot refuses "H100:8" with it (ResourcesMismatchError,
    # sky/catalog/gcp_catalog.py check_accelerator_attachable_to_host), and the old task asked for exactly that
    provider = _provider(tmp_path, standin)
    (offer,) = provider.offers(_request(instance_type="a3-megagpu-8g", extra={"cloud": "gcp"}))
    resources = offer.details["task"]["resources"]
    assert (resources["instance_type"], resources["accelerators"]) == ("a3-megagpu-8g", "H100-MEGA:8")
    assert offer.hourly_usd == 92.2143
    with pytest.raises(ProviderError, match="cellA: SkyPilot's gcp catalog has a3-megagpu-8g with H100-MEGA:8, "
                                            r"not A100_SXM × 8 \(A100-80GB:8\)"):
        provider.offers(_request(gpu="A100_SXM", instance_type="a3-megagpu-8g", extra={"cloud": "gcp"}))
    (lambda_offer,) = provider.offers(_request(instance_type="gpu_8x_h100_sxm5"))  # the same name: as it was
    assert lambda_offer.details["task"]["resources"]["accelerators"] == "H100:8"


def test_catalog_connection_errors_are_retried_then_reported(standin: SkyPilotStandIn, tmp_path: Path) -> None:
    provider = _provider(tmp_path, standin)
    standin.faults += [requests.exceptions.ConnectionError("reset"), ConnectionError("refused")]
    assert provider.offers(_request())[0].hourly_usd == 23.92
    from sky.exceptions import CloudError

    standin.faults += [CloudError("bad catalog row", "lambda", "CatalogError")]
    with pytest.raises(ProviderError, match="skypilot could not read SkyPilot's catalog: CloudError: lambda error"):
        provider.offers(_request())


def _wait_running(provider: SkyPilotProvider, node: Node) -> None:
    deadline = time.monotonic() + 60
    while provider.status(node) is not NodeState.RUNNING:
        assert time.monotonic() < deadline, "the cluster never came up"
        time.sleep(0.05)


def test_spot_launch_ssh_through_the_alias_preemption_owned_and_down(standin: SkyPilotStandIn,
                                                                      tmp_path: Path) -> None:
    provider = _provider(tmp_path, standin)
    (offer,) = provider.offers(_request(gpu="cpu", count=1, market="spot", extra={"cloud": "gcp"}))
    node = provider.launch(offer, "bc-tok1", "bc-camp-1")
    assert node.node_id == "bc-camp-1--bc-tok1" and node.details["request_id"] == "req-1"
    assert node.hourly_usd == 0.07 and node.details["use_spot"] is True
    (launched,) = standin.launched
    assert (launched["cloud"], launched["use_spot"], launched["instance_type"]) == ("gcp", True, "n2-standard-2")
    assert launched["autodown_idle_minutes"] == 30
    assert provider.status(node) is NodeState.STARTING, "the launch request is still running"
    with pytest.raises(ProviderError, match="gives no head IP or ssh credentials"):
        provider.transport(node)
    _wait_running(provider, node)
    transport = provider.transport(node)
    result = transport.run("echo on-the-node")
    assert (result.code, result.out.strip()) == (0, "on-the-node")
    args = transport.ssh_args()
    assert "-F" not in args and args[-1] == f"{standin.sshd.user}@{standin.sshd.host}", "the handle's head IP"
    assert str(standin.sshd.port) in args and str(tmp_path / "skypilot" / "keys" / node.node_id) in args
    assert not list((tmp_path / "user").glob(".sky/generated/ssh/*")), "no ssh config of SkyPilot's is read here"
    assert [n.token for n in provider.owned("bc-camp-1")] == ["bc-tok1"] and provider.owned("bc-other") == []
    standin.preempt(node.node_id)
    assert provider.status(node) is NodeState.PREEMPTED
    transport.close()
    provider.terminate(node)
    provider.terminate(node)  # gone is success
    assert provider.status(node) is NodeState.TERMINATED and standin.inventory() == []


@pytest.mark.parametrize("nodes", [1, 2])
def test_a_docker_cell_runs_in_the_container_reached_through_its_vm(standin: SkyPilotStandIn, tmp_path: Path,
                                                                     nodes: int) -> None:
    """With ``image_id: docker:…`` the handle's IPs, ports and ``ssh_user`` are the VM's; the container
    is ``docker_user`` at localhost:10022 through the VM (sky/utils/cluster_utils.py
    ``SSHConfigHelper.add_cluster``: ProxyCommand ``ssh … -W %h:%p <ssh_user>@<ip>``, then
    ``User docker_user``, ``HostName localhost``, ``Port DEFAULT_DOCKER_PORT``). The image's
    environment is in /etc/profile.d (sky/provision/docker_utils.py ``SETUP_ENV_VARS_CMD``), which
    SkyPilot's own commands read through ``/bin/bash --login`` (sky/utils/command_runner.py)."""
    from tests.fakes.sshd import running_sshd

    with running_sshd(tmp_path / "container", extra_config="SetEnv BENCHCTL_IN=container") as container:
        standin.add_container(container)
        provider = _provider(tmp_path, standin)
        provider.docker_port = container.port  # SkyPilot's 10022 on a real VM
        (offer,) = provider.offers(_request(gpu="cpu", count=1, image="pytorch/pytorch:2.8.0-cuda12.8-cudnn9-devel"))
        node = provider.launch_cluster(offer, nodes, "bc-tok9", "bc-camp-1") if nodes > 1 else \
            provider.launch(offer, "bc-tok9", "bc-camp-1")
        for member in node.members():
            _wait_running(provider, member)
            transport = provider.transport(member)
            landed = transport.run('echo "in the ${BENCHCTL_IN:-vm}"')
            assert (landed.code, landed.out.strip()) == (0, "in the container"), landed.err
            assert transport.python.startswith("/bin/bash --login -c ")
            ran = transport.run(f"{transport.python} -c 'print(6 * 7)'")
            assert (ran.code, ran.out.strip()) == (0, "42"), ran.err
            transport.close()
        provider.terminate(node)


def test_on_demand_cluster_gone_without_our_down_is_terminated(standin: SkyPilotStandIn, tmp_path: Path) -> None:
    provider = _provider(tmp_path, standin)
    (offer,) = provider.offers(_request(gpu="cpu", count=1))
    node = provider.launch(offer, "bc-tok2", "bc-camp-1")
    _wait_running(provider, node)
    standin.preempt(node.node_id)
    assert provider.status(node) is NodeState.TERMINATED
    provider.terminate(node)


def test_an_unreachable_api_server_is_reported_plainly(standin: SkyPilotStandIn, tmp_path: Path) -> None:
    sleeps: list[float] = []
    provider = _provider(tmp_path, standin, sleeps)
    standin.faults += [ConnectionError("refused")] * 5
    with pytest.raises(ProviderError, match=r"API server did not answer while trying to list clusters \(retried\)"):
        provider.owned("bc-camp-1")
    assert standin.faults == [] and len(sleeps) == 4, "five tries, four back-off waits"


def test_a_failed_launch_is_reported_with_skypilots_reason(standin: SkyPilotStandIn, tmp_path: Path) -> None:
    provider = _provider(tmp_path, standin)
    (offer,) = provider.offers(_request(gpu="cpu", count=1, market="spot", extra={"cloud": "gcp"}))
    node = provider.launch(offer, "bc-tok3", "bc-camp-1")
    standin.preempt(node.node_id)  # reclaimed while SkyPilot was still provisioning it: the request fails
    with pytest.raises(NoCapacity, match=r"could not launch bc-camp-1--bc-tok3: ResourcesUnavailableError: .* "
                                            r"reclaimed while it was being provisioned \(`sky api logs req-1`"):
        provider.status(node)
    provider.terminate(node)
    assert provider.status(node) is NodeState.TERMINATED, "after our down, no reason is asked for"


def test_access_needs_every_cells_cloud_enabled(standin: SkyPilotStandIn, tmp_path: Path) -> None:
    provider = _provider(tmp_path, standin)
    provider.check_access([_request(), _request(extra={"cloud": "gcp"})])
    standin.enabled = ["lambda"]
    with pytest.raises(ProviderError) as info:
        provider.check_access([_request(), _request(extra={"cloud": "GCP"}), _request(extra={"cloud": "azure"})])
    assert str(info.value) == ("skypilot: no credentials for azure, gcp (enabled: lambda): set them up and run "
                               "`sky check azure gcp`")
    standin.faults += [ConnectionError("refused")] * 5
    with pytest.raises(ProviderError, match="API server did not answer while trying to read the enabled clouds"):
        provider.check_access([_request()])


def test_the_example_campaigns_tasks_validate_offline() -> None:
    from benchctl.campaign.spec import load_campaign
    from benchctl.engine.providers import offer_request
    from tests.conftest import REPO

    campaign = load_campaign(REPO / "campaigns" / "skypilot-lambda.yaml")
    settings = campaign.spec.providers.skypilot
    assert settings is not None
    parsed = [resources_of(validate(task_config(offer_request(c, c.key, image=campaign.image(c)), c.key,
                                                settings.disk_size), c.key)) for c in campaign.cells]
    assert [(p["cloud"], p["use_spot"]) for p in parsed] == [("lambda", False), ("gcp", True)]
    assert parsed[0]["accelerators"] == {"H100": 8} and parsed[0]["image_id"] is None
    assert parsed[1]["instance_type"] == "a3-highgpu-8g"
    assert parsed[1]["image_id"] == {None: "docker:pytorch/pytorch:2.8.0-cuda12.8-cudnn9-devel"}


def test_autodown_removes_an_idle_cluster_unless_the_controller_renews_it(standin: SkyPilotStandIn,
                                                                         tmp_path: Path) -> None:
    """SkyPilot counts a cluster busy only with a job or a PTY ssh session; benchctl has neither, so
    only the controller's renewals (from ``status``) keep it. Once they stop, autodown removes the
    cluster: an error saying so, not a preemption (the cluster was spot)."""
    standin.minute_s = 0.25  # autodown after 4 idle "minutes" = 1 s; the controller renews every 0.25 s
    provider = SkyPilotProvider(tmp_path / "skypilot", SkyPilotSettings(workdir=str(tmp_path / "work"),
                                                                        autodown_idle_minutes=4), client=standin)
    provider.minute_s = standin.minute_s
    (offer,) = provider.offers(_request(gpu="cpu", count=1, market="spot", extra={"cloud": "gcp"}))
    node = provider.launch(offer, "bc-tok5", "bc-camp-1")
    _wait_running(provider, node)
    transport = provider.transport(node)
    # an ssh session without a PTY: not "busy" to SkyPilot. The first connection may take longer than
    # an idle period on a loaded machine: the controller renews meanwhile, as it does while it works.
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        session = pool.submit(transport.run, "true")
        while not session.done():
            assert provider.status(node) is NodeState.RUNNING
            time.sleep(0.05)
    assert session.result().code == 0
    idle_s = 4 * standin.minute_s
    end = time.monotonic() + 2 * idle_s  # two idle periods: without renewals it would be gone
    while time.monotonic() < end:
        assert provider.status(node) is NodeState.RUNNING, "autodown removed a cluster the controller watches"
        time.sleep(0.05)
    assert standin.autodowned == [] and len(standin.renewals) >= 4
    transport.close()
    time.sleep(1.25 * idle_s)  # the controller is gone for longer than autodown_idle_minutes
    with pytest.raises(ProviderError, match=r"autodown removed bc-camp-1--bc-tok5: .* not a preemption"):
        provider.status(node)
    assert standin.autodowned == [node.node_id]
    restarted = SkyPilotProvider(provider.root, provider.settings, client=standin)  # `benchctl resume` knows too
    restarted.minute_s = standin.minute_s
    with pytest.raises(ProviderError, match=r"autodown removed bc-camp-1--bc-tok5: .* not a preemption"):
        restarted.status(node)
    provider.terminate(node)
    assert provider.status(node) is NodeState.TERMINATED


def test_an_unhealthy_init_cluster_is_an_error_with_skypilots_reason(standin: SkyPilotStandIn,
                                                                       tmp_path: Path) -> None:
    provider = _provider(tmp_path, standin)
    (offer,) = provider.offers(_request(gpu="cpu", count=1))
    node = provider.launch(offer, "bc-tok6", "bc-camp-1")
    _wait_running(provider, node)
    standin.make_unhealthy(node.node_id, "Cluster is abnormal because some nodes are terminated")
    with pytest.raises(ProviderError, match=r"reports bc-camp-1--bc-tok6 unhealthy: Cluster is abnormal"):
        provider.status(node)
    provider.terminate(node)


def test_the_billed_price_is_what_was_launched_where_it_landed(standin: SkyPilotStandIn, tmp_path: Path) -> None:
    provider = _provider(tmp_path, standin)
    (offer,) = provider.offers(_request(gpu="cpu", count=1))
    assert offer.hourly_usd == 0.2
    standin.lands_in = ("us-west-3", 0.31)  # SkyPilot failed over to a dearer region
    node = provider.launch(offer, "bc-tok7", "bc-camp-1")
    _wait_running(provider, node)
    assert node.details["billed_usd_per_hour"] == 0.31 and provider.billed_usd(node) == 0.31
    assert node.details["launched"] == {"region": "us-west-3", "instance_type": "cpu_1x", "use_spot": False}
    provider.terminate(node)


@pytest.mark.parametrize(("cloud", "gpu", "instance_type", "expected"), [
    ("runpod", "H100_SXM", None, "runpod:1x_H100-SXM_SECURE"),
    ("runpod", "H100_PCIE", None, "runpod:1x_H100_SECURE"),
    ("lambda", "H100_SXM", None, "lambda:gpu_1x_h100_sxm5"),  # never the cheaper PCIe type of the same name
])
def test_an_sxm_cell_rents_sxm(standin: SkyPilotStandIn, tmp_path: Path, cloud: str, gpu: str,
                               instance_type: str | None, expected: str) -> None:
    provider = _provider(tmp_path, standin)
    (offer,) = provider.offers(_request(gpu=gpu, count=1, instance_type=instance_type, extra={"cloud": cloud}))
    assert offer.offer_id == expected and offer.gpu == gpu


@pytest.mark.parametrize(("cloud", "gpu"), [("vast", "H100_SXM"), ("vast", "A100_PCIE"), ("vast", "H200"),
                                            ("lambda", "H100_PCIE"), ("aws", "H100_NVL")])
def test_a_gpu_form_the_cloud_cannot_tell_apart_is_refused(standin: SkyPilotStandIn, tmp_path: Path, cloud: str,
                                                           gpu: str) -> None:
    provider = _provider(tmp_path, standin)
    with pytest.raises(ProviderError, match=rf"^cellA: SkyPilot's {cloud} catalog cannot tell {gpu} from"):
        provider.validate(_request(gpu=gpu, count=1, extra={"cloud": cloud}))
    provider.validate(_request(gpu=gpu, count=1, instance_type="x1", extra={"cloud": cloud})), "pinned: fine"


@pytest.mark.parametrize(("request_kw", "refusal"), [
    ({"market": "spot"}, r"Lambda: spot_instance: Spot instances are not supported in Lambda\. \(use market: "),
    ({"extra": {"cloud": "runpod", "nodes": 2}}, r"RunPod: multi-node: Multi-node not supported yet.* \(use nodes: 1"),
    ({"instance_type": "x", "extra": {"cloud": "vast", "nodes": 2}}, r"Vast: multi-node: Multi-node not supported"),
])
def test_what_skypilot_says_the_cloud_lacks_is_refused_before_any_launch(standin: SkyPilotStandIn, tmp_path: Path,
                                                                         request_kw: dict[str, object],
                                                                         refusal: str) -> None:
    """SkyPilot's own flags (sky/clouds/runpod.py, vast.py, lambda_cloud.py ``_CLOUD_UNSUPPORTED_FEATURES``):
    its optimizer would filter the cloud out and every launch would fail over to nothing."""
    provider = _provider(tmp_path, standin)
    with pytest.raises(ProviderError, match=rf"^cellA: SkyPilot cannot launch this cell on {refusal}"):
        provider.validate(_request(**request_kw))
    with pytest.raises(ProviderError, match="SkyPilot cannot launch this cell"):
        provider.offers(_request(**request_kw))
    assert standin.launched == []


@pytest.mark.parametrize("request_kw", [
    {"extra": {"cloud": "lambda", "nodes": 2}},
    {"market": "spot", "image": "pytorch/pytorch:2.8.0", "extra": {"cloud": "gcp", "nodes": 2}},
    {"gpu": "", "instance_type": "p5.48xlarge", "market": "spot", "extra": {"cloud": "aws", "nodes": 4}},
    {"market": "spot", "extra": {"cloud": "kubernetes", "nodes": 2}},  # the cluster's answer, at launch
])
def test_what_the_cloud_supports_passes(request_kw: dict[str, object]) -> None:
    config = task_config(_request(**request_kw), "t", 256)
    validate(config, "cellA")
    assert config.get("num_nodes") == request_kw["extra"]["nodes"]  # type: ignore[index]


def test_sdk_down_keeps_skypilots_output_off_the_terminal(capfd: pytest.CaptureFixture[str]) -> None:
    """SkyPilot's ``stream_and_get`` prints the request's log to ``output_stream``, the terminal when
    None (sky/client/sdk.py ``stream_response``): it must not land on benchctl's progress table."""
    import types

    from benchctl.provisioners.skypilot.sdk import SkySDK

    def stream_and_get(request_id: str, output_stream: Any = None) -> None:
        print(f"Terminating cluster ... {request_id}", file=output_stream)  # None: the terminal, as SkyPilot's

    sdk = SkySDK()
    sdk.sky = types.SimpleNamespace(down=lambda name: f"req-{name}", stream_and_get=stream_and_get)
    sdk.down("c1")
    out, err = capfd.readouterr()
    assert (out, err) == ("", "")


def test_sdk_reads_access_and_price_from_the_handle() -> None:
    """A ``sky.status(_include_credentials=True)`` record: the handle's cached external IPs and ssh
    ports, its ``ssh_user``, ``launched_resources`` and ``get_hourly_price`` (sky/backends/
    cloud_vm_ray_backend.py CloudVmRayResourceHandle), the credentials' key content
    (sky/backends/backend_utils.py ``_update_records_with_credentials``). The price is one node's:
    ``get_hourly_price`` is the whole cluster's (``launched_resources.get_cost(3600) × launched_nodes``)."""
    import types

    from benchctl.provisioners.skypilot.sdk import Access, Launched, _cluster

    resources = types.SimpleNamespace(region="us-east-2", instance_type="gpu_8x_h100_sxm5", use_spot=False,
                                      get_cost=lambda seconds: 24.5 * seconds / 3600)  # one node's (Resources)
    handle = types.SimpleNamespace(cached_external_ips=["203.0.113.7", "203.0.113.8"],
                                   cached_external_ssh_ports=[2222, 22], ssh_user="ubuntu",
                                   launched_resources=resources, launched_nodes=2,
                                   get_hourly_price=lambda: 49.0)  # the cluster's: × launched_nodes
    from sky.schemas.api.responses import StatusResponse
    from sky.utils.status_lib import ClusterStatus

    def response(**fields: Any) -> StatusResponse:  # SkyPilot's own model: its field names, validated
        common = {"launched_at": 0, "autostop": 30, "to_down": True, "cluster_hash": "h", "cluster_ever_up": True,
                  "user_hash": "u", "user_name": "me", "workspace": "default", "is_managed": False, "nodes": 1}
        return StatusResponse.model_validate({**common, **fields})

    cluster = _cluster(response(name="c1", status=ClusterStatus.UP, handle=handle,
                                credentials={"ssh_user": "ubuntu", "ssh_private_key_content": "KEY"}))
    assert cluster.access == Access("203.0.113.7", 2222, "ubuntu", "KEY") and "KEY" not in repr(cluster)
    assert cluster.launched == Launched("us-east-2", "gpu_8x_h100_sxm5", False, 24.5)
    unhealthy = _cluster(response(name="c2", status=ClusterStatus.INIT, init_kind="unhealthy",
                                  init_status_reason="some nodes are terminated"))
    assert (unhealthy.status, unhealthy.unhealthy, unhealthy.access) == ("INIT", "some nodes are terminated", None)


def _plan_refused(tmp_path: Path, standin: SkyPilotStandIn, monkeypatch: pytest.MonkeyPatch,
                  capsys: pytest.CaptureFixture[str], cells: str) -> list[str]:
    """``benchctl plan`` of a campaign with these matrix lines, on the stand-in: exit 2, no traceback,
    nothing launched; the error's lines."""
    from dataclasses import replace

    from benchctl.cli.main import main
    from benchctl.provisioners.registry import PROVIDERS

    monkeypatch.setitem(PROVIDERS, "skypilot", replace(PROVIDERS["skypilot"],
                                                       make=lambda home, settings: _provider(tmp_path, standin)))
    path = tmp_path / "sky.yaml"
    path.write_text("name: sky\nbudget_usd: 500\n"
                    "target: {model: nanochat-d26, target_param_data_ratio: 8.5, total_batch_size: 524288}\n"
                    f"payload: {{profile: {{device_batch_size: 8, sequence_len: 2048}}}}\nmatrix:\n{cells}")
    with pytest.raises(SystemExit) as exit_:
        main(["plan", str(path)])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "Traceback" not in err and err.startswith("error: ")
    assert standin.launched == []
    return err.strip().removeprefix("error: ").splitlines()


def test_plan_refuses_a_gpu_form_the_cloud_cannot_tell_apart(home: Path, tmp_path: Path, standin: SkyPilotStandIn,
                                                            monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    (line,) = _plan_refused(tmp_path, standin, monkeypatch, capsys,
                            "  - {provider: skypilot, cloud: vast, gpu: H100_SXM, count: 8, market: on-demand}\n")
    assert line.startswith("skypilot:H100_SXMx8:on-demand:cloud=vast: SkyPilot's vast catalog cannot tell "
                           "H100_SXM from the other forms")


def test_plan_refuses_spot_on_lambda_and_multi_node_on_runpod(home: Path, tmp_path: Path, standin: SkyPilotStandIn,
                                                               monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    lines = _plan_refused(tmp_path, standin, monkeypatch, capsys,
                          "  - {provider: skypilot, cloud: lambda, gpu: H100_SXM, count: 8, market: spot}\n"
                          "  - {provider: skypilot, cloud: runpod, gpu: H100_SXM, count: 8, nodes: 2, "
                          "market: on-demand}\n")
    assert len(lines) == 2, lines
    assert lines[0].startswith("skypilot:H100_SXMx8:spot:cloud=lambda: SkyPilot cannot launch this cell on Lambda: "
                               "spot_instance")
    assert "on RunPod: multi-node" in lines[1] and "use nodes: 1" in lines[1]


def test_sdk_launch_keeps_skypilots_echo_off_the_terminal_and_not_other_threads(
        capfd: pytest.CaptureFixture[str]) -> None:
    """``sky.launch`` echoes "Running on cluster: <name>" with click (sky/client/sdk.py ``_launch``)."""
    import threading
    import types

    import click

    from benchctl.provisioners.skypilot.sdk import SkySDK

    def launch(task: Any, **kw: Any) -> str:
        click.secho("Running on cluster: ", fg="cyan", nl=False)
        click.secho(kw["cluster_name"])
        other = threading.Thread(target=lambda: print("progress table"))  # the controller's own output
        other.start()
        other.join()
        return "req-1"

    sdk = SkySDK()
    sdk.sky = types.SimpleNamespace(launch=launch)
    assert sdk.launch(object(), "c1", 30) == "req-1"
    assert capfd.readouterr().out == "progress table\n"
