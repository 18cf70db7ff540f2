"""The NCCL log summary the all_reduce check shows, on real logs (tests/fixtures/fabric, sources in its README)."""

from __future__ import annotations

from pathlib import Path

from benchctl.payload.node.node_facts import triage_nccl_log

FABRIC = Path(__file__).parent.parent / "fixtures" / "fabric"


def _triage(name: str) -> dict:
    return triage_nccl_log((FABRIC / name).read_text())


def test_a_node_where_ib_failed_to_load_shows_no_ib() -> None:
    # NCCL 2.28.9 on one H200: "NET/IB : No device found.", "NET/IB : Using [RO]; OOB eth0…", "Failed
    # to initialize NET plugin IB", "Using network Socket". The old reader counted both NET/IB lines as IB
    # traffic and listed "[RO]; OOB eth0:192.0.2.2<0>" as the IB devices.
    got = _triage("nccl-2.28.9-h200-1rank-no-ib.log")
    assert got == {"transports": {}, "version": "2.28.9+cuda13.0", "networks": ["Socket"], "ib_devices": None}


def test_ib_with_gdrdma_is_counted_on_channel_lines() -> None:
    got = _triage("nccl-ib-gdrdma-azure-nd96asr-v4-2node.log")
    assert got["networks"] == ["IB"] and got["transports"]["net_ib"] == got["transports"]["gdrdma"] > 0
    assert "net_socket" not in got["transports"]
    assert got["ib_devices"] == ", ".join(f"mlx5_{i}:1/IB" for i in range(8))


def test_socket_fallback_shows_socket_channels_and_no_ib() -> None:
    got = _triage("nccl-socket-fallback-azure-nd96asr-v4-2node.log")
    assert got["networks"] == ["Socket"] and got["transports"]["net_socket"] > 0
    assert "net_ib" not in got["transports"] and "gdrdma" not in got["transports"] and got["ib_devices"] is None
