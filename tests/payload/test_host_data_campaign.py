"""The campaign knob ``payload.profile.host_data``: validated, passed to the payload's ProfileConfig,
and a bad value is one clear line (exit 2) naming the file, the line and the key."""

from __future__ import annotations

import typing
from pathlib import Path

import pytest

from benchctl.campaign.spec import HostData, parse_campaign
from benchctl.errors import SpecError
from benchctl.payload.job import HOST_DATA
from tests.conftest import cli_here

CAMPAIGN = """\
name: hostload
budget_usd: 5
target: {{model: nanochat-d1, vocab_size: 512, target_param_data_ratio: 8.5, total_batch_size: 128}}
payload:
  phases: [profile]
  profile:
    device_batch_size: 2
    sequence_len: 32{host_data}
matrix:
  - {{provider: local, gpu: cpu, count: 1, price_usd_per_hour: 0.5}}
"""


def _text(value: str | None) -> str:
    return CAMPAIGN.format(host_data="" if value is None else f"\n    host_data: {value}")


def test_the_campaign_knob_names_what_the_payload_knows() -> None:
    assert typing.get_args(HostData) == HOST_DATA


@pytest.mark.parametrize(("value", "expected"), [(None, "synthetic"), ("synthetic", "synthetic"),
                                                 ("tokenize", "tokenize")])
def test_host_data_reaches_the_profile_config(value: str | None, expected: str) -> None:
    campaign = parse_campaign(_text(value), "c.yaml")
    assert campaign.profile_config(campaign.cells[0]).host_data == expected


@pytest.mark.parametrize("value", ["tokenise", "true", "[tokenize]"])
def test_a_bad_host_data_names_the_file_line_key_and_the_choices(value: str) -> None:
    with pytest.raises(SpecError) as err:
        parse_campaign(_text(value), "c.yaml")
    message = str(err.value)
    assert message.startswith("c.yaml:9 payload.profile.host_data:"), message
    assert "'synthetic' or 'tokenize'" in message


def test_plan_refuses_a_bad_host_data_in_one_line_with_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(_text("parquet"))
    result = cli_here("plan", str(path), home=tmp_path / "home")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "payload.profile.host_data" in lines[0] and "'parquet'" in lines[0], result.stderr
    assert "Traceback" not in result.stderr
