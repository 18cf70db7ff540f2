"""A provider's error is named once by ``plan`` (issue 31): SkyPilot's own messages start with
``skypilot: `` (its catalog could not be read, its API server did not answer), and the plan's lines
name the provider themselves; the line said ``skypilot: skypilot: …`` (and ``skypilot: offers
failed: skypilot: …``)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import cli_here

SKY_CELL = "  - {provider: skypilot, cloud: lambda, gpu: H100_SXM, count: 8, market: on-demand}\n"
LOCAL_CELL = "  - {provider: local, gpu: cpu, count: 1, price_usd_per_hour: 0.5}\n"
CAMPAIGN = """\
name: sky
budget_usd: 200
target: {model: nanochat-d26, target_param_data_ratio: 8.5, total_batch_size: 524288}
payload: {profile: {device_batch_size: 8, sequence_len: 2048}}
matrix:
"""


class _Offline:
    """A SkyPilot client on a machine without network: its catalog cannot be downloaded."""

    def prices(self, *_args: Any) -> list[Any]:
        raise ConnectionError("Name or service not known")

    def stop_started_api_server(self) -> None:
        pass


@pytest.fixture
def offline_skypilot(monkeypatch: pytest.MonkeyPatch) -> None:
    from benchctl.provisioners.registry import PROVIDERS
    from benchctl.provisioners.skypilot.provider import SkyPilotProvider

    def make(home: Path, _settings: Any) -> SkyPilotProvider:
        provider = SkyPilotProvider(home / "skypilot", client=_Offline())  # type: ignore[arg-type]
        provider.sleep = lambda _s: None  # its retries, without waiting
        return provider

    monkeypatch.setitem(PROVIDERS, "skypilot", replace(PROVIDERS["skypilot"], make=make))


@pytest.mark.parametrize(("matrix", "code", "named"), [
    (SKY_CELL, 1, "nothing could be planned: skypilot: could not download SkyPilot's catalog"),
    (SKY_CELL + LOCAL_CELL, 1, "skypilot: offers failed: could not download SkyPilot's catalog"),
])
def test_a_skypilot_error_is_named_once(home: Path, tmp_path: Path, offline_skypilot: None, matrix: str, code: int,
                                        named: str) -> None:
    path = tmp_path / "sky.yaml"
    path.write_text(CAMPAIGN + matrix)
    result = cli_here("plan", str(path), home=home)
    assert result.returncode == code, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    said = " ".join((result.stdout + result.stderr).split())
    assert named in said, said
    assert "skypilot: skypilot:" not in said and "failed: skypilot:" not in said, said
