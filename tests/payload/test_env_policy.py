"""The one environment rule (issue 13, item 7): secret names, URL user-info redaction, the local
node allow-list, and ``facts/env.txt`` written redacted and private."""

from __future__ import annotations

import stat
import time
from pathlib import Path

import pytest

from benchctl.campaign.spec import load_campaign
from benchctl.errors import SpecError
from benchctl.payload.env_policy import node_environment, redact_value, redacted, secret_name
from benchctl.payload.node import facts_capture

SECRETS = ["AWS_SECRET_ACCESS_KEY", "VAST_API_KEY", "HF_TOKEN", "PGPASSWORD", "MYSQL_PASSWD", "GOOGLE_CREDENTIALS",
           "GIT_AUTH", "AUTH_HEADER", "OAUTH_CLIENT", "DATABASE_URL", "MY_DATABASE_URL", "BENCHCTL_DB", "SENTRY_DSN",
           "HTTPS_PROXY", "http_proxy", "ALL_PROXY", "no_proxy", "NCCL_API_KEY", "CUDA_TOKEN",
           # innocently named credentials (found by a review after the first fix)
           "GITHUB_PAT", "MYSQL_PWD", "SLACK_WEBHOOK", "COOKIE", "PGPASS", "SMTP_PASS", "SESSION_COOKIE"]
PLAIN = ["PATH", "HOME", "BENCHCTL_DEBUG", "BENCHCTL_DB_POOL", "NCCL_ALGO", "CUDA_VISIBLE_DEVICES", "AUTHOR",
         "LANG", "OMP_NUM_THREADS", "PWD", "OLDPWD", "PATH_SEPARATOR", "BYPASS_CACHE", "COMPASS"]


@pytest.mark.parametrize("name", SECRETS)
def test_secret_names(name: str) -> None:
    assert secret_name(name)


@pytest.mark.parametrize("name", PLAIN)
def test_plain_names(name: str) -> None:
    assert not secret_name(name)


def test_url_user_info_is_redacted_and_the_host_kept() -> None:
    assert redact_value("postgresql+psycopg://bench:s3cret@db.internal:5432/bench") == (
        "postgresql+psycopg://***@db.internal:5432/bench")
    assert redact_value("http://u:p@ss@proxy:3128") == "http://***@proxy:3128", "an unencoded @ in the password"
    assert redact_value("a=http://x:1@h1/p,https://token@h2") == "a=http://***@h1/p,https://***@h2"
    assert redact_value("/usr/bin:/bin") == "/usr/bin:/bin"
    assert redact_value("mailto-like user@example.com and http://host/path@x") == (
        "mailto-like user@example.com and http://host/path@x"), "no user-info: nothing to hide"


def test_redacted_env() -> None:
    env = {"HF_TOKEN": "hf_abc", "PIP_INDEX_URL": "https://user:pw@pypi.internal/simple", "NCCL_ALGO": "Ring"}
    assert redacted(env) == {"HF_TOKEN": "<redacted>", "PIP_INDEX_URL": "https://***@pypi.internal/simple",
                             "NCCL_ALGO": "Ring"}


def test_node_environment_is_an_allow_list_without_secrets() -> None:
    controller = {"PATH": "/usr/bin", "HOME": "/home/me", "LANG": "C.UTF-8", "LC_ALL": "C", "TZ": "UTC",
                  "CUDA_VISIBLE_DEVICES": "0,1", "NCCL_DEBUG": "INFO", "NVIDIA_VISIBLE_DEVICES": "all",
                  "OMP_NUM_THREADS": "4", "PYTHONPATH": "/src", "TORCH_HOME": "/cache", "TMPDIR": "/tmp",
                  "BENCHCTL_FAULTS": "{}",
                  # what stays on the controller
                  "BENCHCTL_DB": "postgresql://u:pw@h/db", "DATABASE_URL": "postgresql://u:pw@h/db",
                  "HTTPS_PROXY": "http://u:p@proxy:3128", "AWS_SECRET_ACCESS_KEY": "x", "BENCHCTL_HOME": "/b",
                  "NCCL_IB_AUTH_TOKEN": "x", "PYTHON_KEYRING_PASSWORD": "x", "SSH_AUTH_SOCK": "/run/agent",
                  "AWS_PROFILE": "prod", "KUBECONFIG": "/k", "SOME_APP_SETTING": "1"}
    assert node_environment(controller) == {
        k: controller[k] for k in ("PATH", "HOME", "LANG", "LC_ALL", "TZ", "CUDA_VISIBLE_DEVICES", "NCCL_DEBUG",
                                   "NVIDIA_VISIBLE_DEVICES", "OMP_NUM_THREADS", "PYTHONPATH", "TORCH_HOME",
                                   "TMPDIR", "BENCHCTL_FAULTS")}


def test_env_txt_is_redacted_and_private(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BENCHCTL_DB", "postgresql://bench:canary-db@db/bench")
    monkeypatch.setenv("DATABASE_URL", "postgresql://app:canary-app@db/app")
    monkeypatch.setenv("HTTPS_PROXY", "http://proxyuser:canary-proxy@proxy:3128")
    monkeypatch.setenv("PIP_INDEX_URL", "https://pip:canary-pip@pypi.internal/simple")
    monkeypatch.setenv("NCCL_ALGO", "Ring")
    monkeypatch.setattr(facts_capture, "COMMANDS", {})  # the environment is what this test is about
    directory = tmp_path / "facts"
    directory.mkdir()
    (directory / "env.txt").write_text("left from before\n")
    (directory / "env.txt").chmod(0o644)
    facts_capture.capture(directory, time.monotonic() + 60)
    env_txt = directory / "env.txt"
    assert stat.S_IMODE(env_txt.stat().st_mode) == 0o600
    text = env_txt.read_text()
    assert "canary" not in text, text
    lines = set(text.splitlines())
    assert {"BENCHCTL_DB=<redacted>", "DATABASE_URL=<redacted>", "HTTPS_PROXY=<redacted>",
            "PIP_INDEX_URL=https://***@pypi.internal/simple", "NCCL_ALGO=Ring"} <= lines


def test_campaign_env_refuses_every_secret_name(tmp_path: Path) -> None:
    for name in ("DATABASE_URL", "HTTPS_PROXY", "BENCHCTL_DB", "SENTRY_DSN"):
        path = tmp_path / "c.yaml"
        path.write_text("name: c\nbudget_usd: 1\ntarget: {model: nanochat-d1, target_param_data_ratio: 8.5, "
                        "total_batch_size: 128}\n"
                        "defaults: {market: on-demand, max_attempts: 1}\n"
                        f"matrix:\n  - {{provider: local, gpu: cpu, count: 1, env: {{{name}: x}}}}\n")
        # BENCHCTL_* names are refused before the secret rule sees them: benchctl's own (issue 31 item 7)
        with pytest.raises(SpecError, match=r"looks like a secret|BENCHCTL_\* names are benchctl's own"):
            load_campaign(path)
