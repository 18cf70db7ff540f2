"""On an EFA node the payload's ranks get the EFA environment the Deep Learning AMI sets up only for
login shells (payload/comm/efa_env.py): FI_PROVIDER=efa and aws-ofi-nccl / libfabric on LD_LIBRARY_PATH,
even when the payload is started by a non-login SSH command with a bare environment."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchctl.payload.comm.efa_env import efa_environment
from tests.conftest import REPO

ON_NODE = {"/opt/amazon/ofi-nccl/lib", "/opt/amazon/efa/lib"}
"""What a current DLAMI has of EFA_LIBRARY_DIRS (the older aws-ofi-nccl prefixes are absent)."""


def test_an_efa_fabric_adds_the_provider_and_the_plugin_paths_that_exist() -> None:
    added = efa_environment("efa 32", {"LD_LIBRARY_PATH": "/usr/local/cuda/lib64"}, exists=ON_NODE.__contains__)
    assert added == {"FI_PROVIDER": "efa",
                     "LD_LIBRARY_PATH": "/opt/amazon/ofi-nccl/lib:/opt/amazon/efa/lib:/usr/local/cuda/lib64"}
    assert efa_environment("efa 32", {}, exists=ON_NODE.__contains__)["LD_LIBRARY_PATH"] == (
        "/opt/amazon/ofi-nccl/lib:/opt/amazon/efa/lib"), "no empty entry (the loader reads one as the cwd)"


def test_what_is_set_already_stays_and_other_fabrics_get_nothing() -> None:
    node = {"FI_PROVIDER": "efa;ofi_rxm", "LD_LIBRARY_PATH": "/opt/amazon/efa/lib:/opt/amazon/ofi-nccl/lib"}
    assert efa_environment("efa 16", node, exists=ON_NODE.__contains__) == {}
    for fabric in (None, "none", "ib 8x400", "roce 8x400"):
        assert efa_environment(fabric, {}, exists=ON_NODE.__contains__) == {}, fabric


def _rank_env(tmp_path: Path, fabric: str | None, cell_env: dict[str, str]) -> dict[str, str]:
    """What the command phase's process sees when the payload starts as a plain SSH command would
    start it: no login shell, nothing from /etc/profile.d, only PATH."""
    probe = "import json, os; print(json.dumps({k: os.environ.get(k) for k in ('FI_PROVIDER', 'LD_LIBRARY_PATH')}))"
    (tmp_path / "probe.py").write_text(probe)
    job = {"campaign": "t", "cell": "c", "attempt": 1, "token": "tok", "gpu": "cpu", "count": 1,
           "phases": ["command"], "env": cell_env, "fabric": fabric,
           "command": {"run": f"{sys.executable} {tmp_path / 'probe.py'}", "timeout_minutes": 1}}
    (tmp_path / "job.json").write_text(json.dumps(job))
    proc = subprocess.run(["env", "-i", "PATH=/usr/bin:/bin", f"PYTHONPATH={REPO}", sys.executable, "-m", "payload",
                           "run", "job.json"], cwd=tmp_path, timeout=60, capture_output=True, text=True)
    assert proc.returncode == 0, (proc.stderr, (tmp_path / "events.jsonl").read_text())
    return dict(json.loads((tmp_path / "artifacts" / "command.stdout").read_text()))


@pytest.mark.parametrize(("fabric", "cell_env", "provider"), [
    ("efa 32", {}, "efa"),
    ("efa 32", {"FI_PROVIDER": "tcp"}, "tcp"),  # the cell's own env has the last word
    ("ib 8x400", {}, None),
    (None, {}, None),
])
def test_the_ranks_of_an_efa_node_get_fi_provider_through_a_non_login_ssh(tmp_path: Path, fabric: str | None,
                                                                          cell_env: dict[str, str],
                                                                          provider: str | None) -> None:
    assert _rank_env(tmp_path, fabric, cell_env)["FI_PROVIDER"] == provider
