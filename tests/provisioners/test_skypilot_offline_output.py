"""SkyPilot's own output, offline, through its real SDK: what reaches the terminal is plain text.

Reproduced with SkyPilot 0.14.1's real catalog code in a subprocess whose HOME is a temp dir (no
catalog cached, so SkyPilot downloads one) and whose ``requests.get`` fails as it does without a
network (``ConnectionError``; nothing leaves the machine). Without a client call first, SkyPilot
believes it runs inside its API server (sky/utils/annotations.py ``is_on_api_server``) and prints
encoded spinner payloads to stdout (sky/catalog/common.py ``read_catalog`` → sky/utils/rich_utils.py
``safe_status`` → ``EncodedStatus``: ``<sky-payload>"<rich_init>[bold cyan]Updating Lambda catalog…"``),
and its logger writes coloured lines to stdout (sky/sky_logging.py ``_setup_logger``), where
benchctl's tables and JSON go.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO
from tests.test_plan import SKY_CAMPAIGN

OFFLINE = """\
import requests

def offline(*args, **kwargs):
    raise requests.exceptions.ConnectionError("Failed to resolve 'raw.githubusercontent.com' (offline)")

requests.get = offline
"""

PRICES = OFFLINE + """\
from benchctl.provisioners.skypilot.sdk import SkySDK

sdk = SkySDK()
for _ in range(2):  # a retried call logs the same failure again
    try:
        sdk.prices("lambda", "H100:8", None, False, None, None)
    except requests.exceptions.ConnectionError as exc:
        print("raised", type(exc).__name__)
"""

PLAN = OFFLINE + """\
import sys
from benchctl.provisioners.skypilot import sdk

def refuse(self):
    raise SystemExit("enabled_clouds was asked: it starts SkyPilot's API server")

sdk.SkySDK.enabled_clouds = refuse
from benchctl.cli.main import main
main(["plan", sys.argv[1], "--format", "json"])
"""


def _run(code: str, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HOME": str(tmp_path / "user"), "BENCHCTL_HOME": str(tmp_path / "bh"),
           "PYTHONPATH": str(REPO)}
    env.pop("SKY_RUNTIME_DIR", None)
    return subprocess.run([sys.executable, "-W", "ignore", "-c", code, *args], capture_output=True, text=True,
                          env=env, cwd=REPO, timeout=300)


def test_skypilots_catalog_messages_reach_the_terminal_as_plain_text(tmp_path: Path) -> None:
    proc = _run(PRICES, tmp_path)
    assert proc.stdout.splitlines() == ["raised ConnectionError", "raised ConnectionError"], proc.stdout
    assert "<sky-payload" not in proc.stderr and "\x1b" not in proc.stderr and "[bold" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("skypilot: ")]
    assert lines == ["skypilot: Failed to fetch Lambda catalog lambda/vms.csv. Please check your internet connection."]


def test_plan_offline_asks_no_api_server_and_says_what_failed(tmp_path: Path) -> None:
    """``plan --format json`` on a SkyPilot campaign offline, without credentials: it asks nothing that
    starts SkyPilot's API server (``enabled_clouds``, as ``check`` avoids it), nothing but benchctl's
    own output reaches stdout, and the failure names SkyPilot's catalog download, not its API server."""
    path = tmp_path / "sky.yaml"
    path.write_text(SKY_CAMPAIGN)
    proc = _run(PLAN, tmp_path, str(path))
    assert "enabled_clouds was asked" not in proc.stderr
    assert proc.returncode == 1, proc.stderr  # nothing could be priced: try again later
    assert proc.stdout == ""
    assert "<sky-payload" not in proc.stderr and "\x1b" not in proc.stderr
    assert "could not download SkyPilot's catalog" in proc.stderr and "API server" not in proc.stderr
