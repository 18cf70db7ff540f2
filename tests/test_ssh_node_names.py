"""An ssh node's ``name`` and ``gpu`` from the campaign (``providers.ssh.nodes``) are checked like any
other value (issue 31). The name becomes a file name under the ssh provider's ``claims`` and
``known_hosts`` folders: one that is not a plain file name (``../../x``) is refused at ``plan``,
and the provider keeps every file inside its folders whatever label it is given (a stored record,
a ``host:port`` label). The GPU is one of benchctl's GPU names (``payload.node.gpu_models``): an
alias becomes the model's name, so a node ``h100-sxm`` serves an ``H100_SXM`` cell, and a bare
family is refused with the names to use."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchctl.provisioners.base import OfferRequest
from benchctl.provisioners.ssh import SSHNode, SSHProvider
from tests.conftest import cli_here
from tests.test_hostile_inputs import refused
from tests.test_hostile_plan import SSH_CAMPAIGN

BOX = SSH_CAMPAIGN.replace("HOST", "127.0.0.1").replace("USER", "me")


def _plan(home: Path, tmp_path: Path, text: str):  # type: ignore[no-untyped-def]
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return cli_here("plan", str(path), home=home)


@pytest.mark.parametrize("name", ["../../x", "a/b", "..", ".", "", "box one", "-box", "box\\x01", "é" * 3, "b" * 65])
def test_an_ssh_node_name_that_is_no_plain_file_name_is_refused_at_plan(home: Path, tmp_path: Path,
                                                                      name: str) -> None:
    assert "name: box," in BOX
    line = refused(_plan(home, tmp_path, BOX.replace("name: box,", f'name: "{name}",')), "providers.ssh.nodes[0]",
                   "name")
    assert "1-64 letters, digits" in line and "starting with a letter or digit" in line, line
    assert not list(tmp_path.glob("x*")) and not (home / "x").exists()


@pytest.mark.parametrize("name", ["box", "gpu-01.lab", "node_2", "h100:a@rack3"])
def test_plain_ssh_node_names_still_plan(home: Path, tmp_path: Path, name: str) -> None:
    result = _plan(home, tmp_path, BOX.replace("name: box,", f'name: "{name}",'))
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("label", ["../../escaped", "..", "a/../../escaped"])
def test_the_provider_keeps_claims_and_host_keys_inside_its_folders(tmp_path: Path, label: str) -> None:
    """A label that never passed the campaign's check (a record stored before it, a ``host:port``
    default): the claim and the pinned host keys are files in the provider's folders all the same.
    (The user starts with ``-``: ``terminate`` then frees the claim without asking ssh to stop anything.)"""
    root = tmp_path / "home" / "ssh"
    machine = SSHNode.model_construct(name=label, host="127.0.0.1", port=22, user="-me", key=None, gpu="cpu",
                                      count=1, price_usd_per_hour=0.0, python="python3", workdir="benchctl",
                                      rendezvous_host=None)
    provider = SSHProvider(root, [machine])
    [offer] = provider.offers(OfferRequest(gpu="cpu", count=1, market="on-demand"))
    node = provider.launch(offer, "tok", "campaign")
    claims = list((root / "claims").iterdir())
    assert len(claims) == 1 and claims[0].read_text() == "tok", "the claim is one file in claims/"
    assert not list(tmp_path.rglob("escaped")), "nothing written outside the provider's folders"
    known_hosts = provider.transport(node).known_hosts
    assert known_hosts.parent == root / "known_hosts" and not set("%$~/") & set(known_hosts.name), known_hosts
    assert provider.offers(OfferRequest(gpu="cpu", count=1, market="on-demand")) == [], "claimed: not offered"
    provider.terminate(node)
    assert list((root / "claims").iterdir()) == [], "terminate frees that claim"
    assert provider.offers(OfferRequest(gpu="cpu", count=1, market="on-demand")), "free again"


def test_a_plain_label_keeps_its_file_name(tmp_path: Path) -> None:
    """Claims and pinned keys stored before this check keep their names (``host:port`` too)."""
    provider = SSHProvider(tmp_path / "ssh", [SSHNode(host="10.0.0.7", user="me", gpu="cpu", count=1)])
    node = provider.launch(provider.offers(OfferRequest(gpu="cpu", count=1, market="on-demand"))[0], "tok", "c")
    assert [p.name for p in (tmp_path / "ssh" / "claims").iterdir()] == ["10.0.0.7:22"]
    assert provider.transport(node).known_hosts == tmp_path / "ssh" / "known_hosts" / "10.0.0.7:22"


@pytest.mark.parametrize(("given", "model"), [("h100-sxm", "H100_SXM"), ("H200 SXM", "H200"), ("CPU", "cpu"),
                                              ("l40s", "L40S")])
def test_an_ssh_nodes_gpu_is_a_name_of_the_gpu_vocabulary(given: str, model: str) -> None:
    machine = SSHNode(name="box", host="127.0.0.1", user="me", gpu=given, count=8)
    assert machine.gpu == model


def test_a_node_named_by_an_alias_serves_the_cells_of_its_model(home: Path, tmp_path: Path) -> None:
    text = (BOX.replace("{provider: ssh, gpu: cpu, count: 1}", "{provider: ssh, gpu: H100_SXM, count: 1}")
            .replace("gpu: cpu, count: 1, price_usd_per_hour: 0.5}", "gpu: h100-sxm, count: 1, "
                                                                     "price_usd_per_hour: 0.5}"))
    result = _plan(home, tmp_path, text)
    assert result.returncode == 0, result.stderr
    assert "no offer now" not in result.stdout + result.stderr, "the node h100-sxm is the cell's H100_SXM"


@pytest.mark.parametrize(("given", "words"), [
    ("H100", "unknown GPU model 'H100'; H100 is H100_SXM or H100_NVL or H100_PCIE: say which"),
    ("A10G", "unknown GPU model 'A10G'; known: cpu, H100_SXM"),
])
def test_an_ssh_nodes_gpu_outside_the_vocabulary_is_refused_at_plan(home: Path, tmp_path: Path, given: str,
                                                                    words: str) -> None:
    text = BOX.replace("gpu: cpu, count: 1, price_usd_per_hour: 0.5}", f"gpu: {given}, count: 1, "
                                                                       "price_usd_per_hour: 0.5}")
    line = refused(_plan(home, tmp_path, text), "providers.ssh.nodes[0]", "gpu")
    assert words in line, line
