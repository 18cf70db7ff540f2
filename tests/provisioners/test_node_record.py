"""Node records: the billed price and host are typed fields, and records written by older versions
(``node_json`` in the store, node files on disk) still read."""

from __future__ import annotations

import json

from benchctl.provisioners.base import Node, Offer

OFFER = {"provider": "vastai", "offer_id": "42", "gpu": "H100_SXM", "count": 8, "vcpus": 128, "region": "US",
         "hourly_usd": 19.5, "market": "spot", "host": "602"}


def test_a_node_round_trips_with_its_billed_price_and_host() -> None:
    node = Node(provider="vastai", node_id="7", token="tok", campaign_tag="camp", offer=Offer(**OFFER),
                details={"instance_id": 7}, hourly_usd=20.25, host="602")
    raw = json.loads(json.dumps(node.to_dict()))  # as stored in node_json
    assert (raw["hourly_usd"], raw["host"]) == (20.25, "602")
    assert Node.from_dict(raw) == node


def test_an_old_record_keeps_price_and_host_in_details() -> None:
    """What versions before the typed fields stored: ``details["billed_usd_per_hour"]`` and
    ``details["host"]``, no top-level fields, and an offer without ``details``."""
    old = {"provider": "vastai", "node_id": "7", "token": "tok", "campaign_tag": "camp", "offer": dict(OFFER),
           "details": {"instance_id": 7, "host": "602", "billed_usd_per_hour": 20.25}}
    node = Node.from_dict(json.loads(json.dumps(old)))
    assert (node.hourly_usd, node.host) == (20.25, "602")
    assert node.details == {"instance_id": 7}
    assert node.offer.details == {}
    assert Node.from_dict(node.to_dict()) == node


def test_an_old_record_without_a_billed_price_or_host_has_none() -> None:
    old = {"provider": "runpod", "node_id": "p", "token": "tok", "campaign_tag": "camp", "offer": dict(OFFER),
           "details": {"pod_id": "p", "host": ""}}
    node = Node.from_dict(old)
    assert (node.hourly_usd, node.host, node.details) == (None, None, {"pod_id": "p"})
    bare = Node.from_dict({**old, "details": {"leader_pid": 1}})
    assert (bare.hourly_usd, bare.host, bare.details) == (None, None, {"leader_pid": 1})
