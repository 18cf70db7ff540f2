"""``plan`` on SkyPilot launches nothing and leaves no API server it started running."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fakes.skypilot_standin import SkyPilotStandIn
from tests.test_plan import SKY_CAMPAIGN, _plan_in_process, sky_standin  # noqa: F401 (the fixture)


def test_plan_stops_the_api_server_it_started(home: Path, tmp_path: Path, sky_standin: SkyPilotStandIn,  # noqa: F811
                                              capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "sky.yaml"
    path.write_text(SKY_CAMPAIGN)
    assert _plan_in_process(str(path)) == 0, capsys.readouterr().err
    assert not sky_standin.api_server_running, "plan stopped the local API server its credentials check started"


def test_plan_leaves_a_server_that_was_running_alone(home: Path, tmp_path: Path,
                                                      sky_standin: SkyPilotStandIn,  # noqa: F811
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    sky_standin.api_server_running = True
    path = tmp_path / "sky.yaml"
    path.write_text(SKY_CAMPAIGN)
    assert _plan_in_process(str(path)) == 0, capsys.readouterr().err
    assert sky_standin.api_server_running, "the user's own server keeps running"


def test_plan_starts_no_api_server_also_when_a_cloud_has_no_credentials(
        home: Path, tmp_path: Path, sky_standin: SkyPilotStandIn,  # noqa: F811
        capsys: pytest.CaptureFixture[str]) -> None:
    """As ``check``: asking for the enabled clouds would start the server, so plan does not ask."""
    sky_standin.enabled = ["lambda"]
    path = tmp_path / "sky.yaml"
    path.write_text(SKY_CAMPAIGN)
    assert _plan_in_process(str(path)) == 0, capsys.readouterr().err
    assert sky_standin.api_server_starts == 0 and not sky_standin.api_server_running
