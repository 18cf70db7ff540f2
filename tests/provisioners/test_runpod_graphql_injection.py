"""No campaign value can change a RunPod GraphQL query: values travel as variables, verbatim."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from benchctl.provisioners.base import OfferRequest
from benchctl.provisioners.runpod import queries as runpod_graphql
from benchctl.provisioners.runpod.provider import RunPodProvider, RunPodSettings, UnknownGpuType
from tests.fakes.runpod_fake import FakeRunPod

EVIL = 'img:1" }) { id } podTerminate(input: {podId: "victim"}) }\n#'
"""A value that closes the string and the input object, then adds a mutation of its own."""


@pytest.fixture
def fake(runpod_fake: FakeRunPod) -> FakeRunPod:
    return runpod_fake


def _sent(fake: FakeRunPod) -> list[dict]:
    return [json.loads(body) for body in fake.requests]


def test_image_and_name_with_query_syntax_reach_the_api_as_data(fake: FakeRunPod, tmp_path: Path) -> None:
    provider = RunPodProvider(tmp_path / "runpod", RunPodSettings())
    (offer, *_) = provider.offers(OfferRequest(gpu="H100_SXM", count=8, market="on-demand", image=EVIL))
    fake.pods["victim"] = {**fake.pods.get("victim", {}), "id": "victim", "name": "someone-else",
                           "desiredStatus": "RUNNING", "created": 0.0}
    evil_tag = 'bc-"}){id}\n'
    node = provider.launch(replace(offer, details={**offer.details, "image": EVIL}), "bc-tok", evil_tag)
    pod = fake.pods[node.node_id]
    assert pod["imageName"] == EVIL and pod["name"] == f"{evil_tag}--bc-tok", "the values arrived verbatim"
    assert "victim" in fake.pods, "the injected podTerminate did not run"
    for request in _sent(fake):
        assert request["query"] in runpod_graphql.QUERIES, "every query text is one of the constants"
        assert EVIL not in request["query"] and "victim" not in request["query"]
    provider.terminate(node)
    del fake.pods["victim"]
    assert fake.inventory() == []


def test_a_gpu_name_with_query_syntax_asks_for_that_gpu_only(fake: FakeRunPod, tmp_path: Path) -> None:
    provider = RunPodProvider(tmp_path / "runpod", RunPodSettings())
    evil_gpu = 'NVIDIA H100 80GB HBM3"}) { id } gpuTypes(input: {id: "NVIDIA H100 PCIe'
    with pytest.raises(UnknownGpuType):  # no GPU type has that id
        provider.offers(OfferRequest(gpu=evil_gpu, count=8, market="on-demand"))
    (request,) = _sent(fake)
    assert request["query"] == runpod_graphql.GPU_TYPES
    assert request["variables"] == {"gpuTypeId": evil_gpu}


def test_pod_ids_are_variables_in_status_and_terminate(fake: FakeRunPod, tmp_path: Path) -> None:
    provider = RunPodProvider(tmp_path / "runpod", RunPodSettings())
    (offer, *_) = provider.offers(OfferRequest(gpu="H100_SXM", count=8, market="on-demand"))
    node = provider.launch(offer, "bc-tok", "bc-camp")
    forged = replace(node, node_id=f'{node.node_id}"}}) {{ id }} }}')
    provider.terminate(forged)  # no such pod: gone, and the real one is untouched
    assert fake.inventory() == [node.node_id]
    assert [r["variables"] for r in _sent(fake)[-2:]] == [{"podId": forged.node_id}] * 2
    provider.terminate(node)
    assert fake.inventory() == []
