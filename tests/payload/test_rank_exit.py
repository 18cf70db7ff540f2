"""An attempt's rank leaves with ``os._exit`` once its phases are done and its group destroyed (no
interpreter teardown of torch, billed for nothing); a rank started for one phase (the profile
under nsys) exits normally, so the profiler's exit handlers write its report."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from benchctl.payload import __main__ as payload_main
from benchctl.payload.comm.ranks import done_file


class Exited(Exception):
    pass


def _job(tmp_path: Path) -> Path:
    job = {"campaign": "t", "cell": "local/cpu/1", "attempt": 1, "token": "tok", "gpu": "cpu", "count": 1,
           "phases": ["preflight"], "done_phases": []}
    path = tmp_path / "job.json"
    path.write_text(json.dumps(job))
    (tmp_path / "artifacts" / "logs").mkdir(parents=True)
    return path


@pytest.mark.parametrize("one_phase", [False, True])
def test_an_attempts_rank_leaves_without_teardown_a_one_phase_rank_exits_normally(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, one_phase: bool) -> None:
    exits: list[int] = []

    def fake_exit(code: int) -> None:
        exits.append(code)
        raise Exited

    monkeypatch.setattr(payload_main.os, "_exit", fake_exit)
    monkeypatch.setattr("sys.stdin", io.StringIO("preflight_torch\n"))
    job, rendezvous = _job(tmp_path), tmp_path / ".rendezvous-attempt"
    argv = ["worker", str(job), "--rank", "0", "--world-size", "1", "--rendezvous", str(rendezvous),
            "--timeout-s", "30", *(["--phase", "preflight_torch"] if one_phase else [])]
    if one_phase:
        assert payload_main.main(argv) == 0
        assert exits == []
    else:
        with pytest.raises(Exited):
            payload_main.main(argv)
        assert exits == [0]
    assert done_file(rendezvous, 0).read_text() == "preflight_torch\n", "the phase ran and was recorded first"
