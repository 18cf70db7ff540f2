"""The one table of providers (provisioners/registry.py): the campaign schema, the factory and the
error messages read it, and each provider's settings are defined once, by the provider."""

from __future__ import annotations

import sys
import typing
from pathlib import Path

import pytest

from benchctl.campaign.spec import CellSpec, ProvidersSpec, parse_campaign
from benchctl.engine.providers import AVAILABLE, Providers
from benchctl.errors import SpecError
from benchctl.provisioners.registry import PROVIDERS

WITH_SETTINGS = [name for name, entry in PROVIDERS.items() if entry.settings is not None]

CAMPAIGN = """\
name: reg
budget_usd: 50
target: {model: nanochat-d1, target_param_data_ratio: 8.5, total_batch_size: 4096}
payload: {profile: {device_batch_size: 2, sequence_len: 32}}
providers:
  local: {python: /opt/cuda-venv/bin/python}
  ssh: {nodes: [{name: box, host: 127.0.0.1, user: me, gpu: H100_SXM, count: 8, price_usd_per_hour: 9.5}]}
  runpod: {cloud: COMMUNITY, container_disk_gb: 80}
  vastai: {ssh: proxy, bid_margin: 0.2}
  aws: {region: eu-west-1, ssh_cidr: 203.0.113.7/32, disk_gb: 300}
  skypilot: {disk_size: 512}
matrix:
  - {provider: local, gpu: cpu, count: 1, price_usd_per_hour: 0.5, market: on-demand, max_attempts: 1}
"""


def test_a_campaign_accepts_exactly_the_tables_providers() -> None:
    assert typing.get_args(CellSpec.model_fields["provider"].annotation) == tuple(PROVIDERS) == AVAILABLE


def test_the_campaign_schema_uses_each_providers_own_settings_class() -> None:
    assert list(ProvidersSpec.model_fields) == WITH_SETTINGS
    for name in WITH_SETTINGS:
        settings = PROVIDERS[name].settings
        assert ProvidersSpec.model_fields[name].annotation == settings | None, name
        assert settings is not None, name
        assert settings.__module__.startswith(f"benchctl.provisioners.{name}"), "defined by the provider"


def test_the_campaigns_settings_reach_the_providers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    campaign = parse_campaign(CAMPAIGN, "reg.yaml")
    providers = Providers(tmp_path, campaign.spec.providers)
    aws = providers.get("aws")
    assert aws.settings is campaign.spec.providers.section("aws")  # type: ignore[attr-defined]
    assert (aws.settings.region, aws.settings.disk_gb) == ("eu-west-1", 300)  # type: ignore[attr-defined]
    ssh = providers.get("ssh")
    assert list(ssh.machines) == ["box"]  # type: ignore[attr-defined]
    assert providers.get("local").python == "/opt/cuda-venv/bin/python"  # type: ignore[attr-defined]
    assert Providers(tmp_path / "bare").get("local").python == sys.executable  # type: ignore[attr-defined]
    assert Providers(tmp_path / "bare").get("aws").settings.region == "us-east-1"  # type: ignore[attr-defined]


def test_a_stored_campaign_reads_back_with_every_providers_settings() -> None:
    campaign = parse_campaign(CAMPAIGN, "reg.yaml")
    again = type(campaign).model_validate_json(campaign.model_dump_json())  # spec_json in the store
    assert again == campaign
    assert [again.spec.providers.section(name) for name in WITH_SETTINGS] == [
        campaign.spec.providers.section(name) for name in WITH_SETTINGS]


@pytest.mark.parametrize("name", WITH_SETTINGS)
def test_no_credential_enters_through_a_providers_settings(name: str) -> None:
    """Settings are stored with the campaign (spec_json): a key given there is refused, never kept."""
    text = CAMPAIGN.replace(f"  {name}: {{", f"  {name}: {{api_key: hunter2, ", 1)
    with pytest.raises(SpecError, match=rf"providers\.{name}\.api_key: unknown key"):
        parse_campaign(text, "reg.yaml")


def test_an_unknown_provider_is_named_with_the_tables_list() -> None:
    with pytest.raises(SpecError) as error:
        parse_campaign(CAMPAIGN.replace("provider: local", "provider: lambda"), "reg.yaml")
    assert "input should be 'local', 'ssh', 'runpod', 'vastai', 'aws' or 'skypilot', not 'lambda'" in str(error.value)
