"""The local provider's one-node-at-a-time rule holds across processes (and BENCHCTL_HOMEs)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchctl.provisioners.base import NoCapacity, OfferRequest
from benchctl.provisioners.local.provider import LocalProvider
from tests.conftest import REPO

OTHER_CONTROLLER = """
import sys
from pathlib import Path
from benchctl.provisioners.base import OfferRequest
from benchctl.provisioners.local.provider import LocalProvider

provider = LocalProvider(Path(sys.argv[1]))
offer = provider.offers(OfferRequest(gpu="cpu", count=1, market="on-demand"))[0]
node = provider.launch(offer, "othertoken", "othercampaign")
print("launched", flush=True)
sys.stdin.readline()
provider.terminate(node)
print("terminated", flush=True)
sys.stdin.readline()
"""

REQUEST = OfferRequest(gpu="cpu", count=1, market="on-demand", price_usd_per_hour=0.1)


def test_a_local_node_of_another_process_makes_this_one_wait(tmp_path: Path) -> None:
    assert os.environ["BENCHCTL_LOCAL_LOCK"].startswith(str(tmp_path))
    other = subprocess.Popen([sys.executable, "-c", OTHER_CONTROLLER, str(tmp_path / "other-home" / "local")],
                             cwd=REPO, text=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             env={**os.environ, "PYTHONPATH": str(REPO)})
    assert other.stdin is not None and other.stdout is not None
    mine = LocalProvider(tmp_path / "my-home" / "local")  # another BENCHCTL_HOME, the same machine
    try:
        offer = mine.offers(REQUEST)[0]
        assert other.stdout.readline().strip() == "launched"
        assert mine.offers(REQUEST) == [] and mine.all_busy(REQUEST), "the machine is busy: the cell waits"
        with pytest.raises(NoCapacity, match=f"another process runs a local node on this machine \\(pid {other.pid}, "
                           "campaign othercampaign, home .*other-home, since "):
            mine.launch(offer, "minetoken", "mycampaign")
        other.stdin.write("\n")
        other.stdin.flush()
        assert other.stdout.readline().strip() == "terminated"
        assert not mine.all_busy(REQUEST)
        node = mine.launch(mine.offers(REQUEST)[0], "minetoken2", "mycampaign")
        try:
            assert other_sees_busy(tmp_path)
        finally:
            mine.terminate(node)
        assert not other_sees_busy(tmp_path), "terminate gives the machine back"
    finally:
        other.stdin.write("\n")
        other.stdin.flush()
        other.wait(timeout=30)


def other_sees_busy(tmp_path: Path) -> bool:
    probe = ("from pathlib import Path; from benchctl.provisioners.base import OfferRequest; "
             "from benchctl.provisioners.local.provider import LocalProvider; import sys; "
             "print(LocalProvider(Path(sys.argv[1])).all_busy(OfferRequest(gpu='cpu', count=1, market='on-demand')))")
    out = subprocess.run([sys.executable, "-c", probe, str(tmp_path / "third")], cwd=REPO, capture_output=True,
                         text=True, env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip() == "True"


def test_the_lock_is_per_user_in_the_temp_dir_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    import tempfile

    from benchctl.provisioners.local.machine_lock import lock_path

    monkeypatch.delenv("BENCHCTL_LOCAL_LOCK")
    monkeypatch.setenv("BENCHCTL_HOME", "/somewhere/else")
    assert lock_path() == Path(tempfile.gettempdir()) / f"benchctl-local-{os.getuid()}.lock"


def test_plan_says_a_local_cell_is_busy_while_another_process_runs_a_node(home: Path, tmp_path: Path,
                                                                         write_campaign) -> None:  # type: ignore[no-untyped-def]
    from tests.conftest import cli_here

    other = subprocess.Popen([sys.executable, "-c", OTHER_CONTROLLER, str(tmp_path / "other-home" / "local")],
                             cwd=REPO, text=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             env={**os.environ, "PYTHONPATH": str(REPO)})
    assert other.stdin is not None and other.stdout is not None
    try:
        assert other.stdout.readline().strip() == "launched"
        result = cli_here("plan", str(write_campaign()), home=home)
        assert result.returncode == 0, result.stderr
        # issue 29 item 6: who holds the machine (was: "busy now: every matching node is in use")
        holder = f"pid {other.pid}, campaign othercampaign, home {tmp_path / 'other-home'}, since "
        assert result.stdout.count("busy now: another controller runs a local node on this machine") == 2, \
            result.stdout
        assert result.stdout.count(holder) == 2 and os.environ["BENCHCTL_LOCAL_LOCK"] in result.stdout
    finally:
        other.stdin.write("\n\n")
        other.stdin.flush()
        other.wait(timeout=30)
