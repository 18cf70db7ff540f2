"""Issue 28 item 3: the ranks' environment carries upstream's allocator setting on GPU, and the
communicators made for the collectives' subgroups are destroyed before the profile."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from typing import Any

import pytest
import torch.distributed as dist

from benchctl.payload import worker
from benchctl.payload.comm import group
from benchctl.payload.comm.ranks import ALLOCATOR_CONF, allocator_env
from benchctl.payload.job import Job


def _job(**fields: Any) -> Job:
    return Job(**{"campaign": "t", "cell": "c", "attempt": 1, "token": "t", "gpu": "H100_SXM", "count": 8,
                  "phases": ["profile"], "done_phases": [], **fields})


def test_gpu_ranks_get_expandable_segments_as_upstream_sets_it() -> None:
    assert allocator_env(_job(), {}) == {"PYTORCH_ALLOC_CONF": ALLOCATOR_CONF} == {
        "PYTORCH_ALLOC_CONF": "expandable_segments:True"}
    assert allocator_env(_job(gpu="cpu", count=1), {}) == {}  # no CUDA allocator on a CPU cell
    # the node's or the campaign's own setting wins, in either spelling
    assert allocator_env(_job(), {"PYTORCH_ALLOC_CONF": "backend:native"}) == {}
    assert allocator_env(_job(), {"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:512"}) == {}


def test_the_collectives_subgroups_are_destroyed_before_the_profile(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """One gloo rank runs collectives then profile as the runner names them: the subgroups the first
    made (``subgroups``) are gone when the profile starts, destroyed with ``destroy_process_group``."""
    job = {"campaign": "t", "cell": "c", "attempt": 1, "token": "t", "gpu": "cpu", "count": 1,
           "phases": ["collectives", "profile"], "done_phases": []}
    (tmp_path / "job.json").write_text(json.dumps(job))
    (tmp_path / "artifacts" / "logs").mkdir(parents=True)  # the runner makes it before it starts ranks
    destroyed: list[Any] = []
    seen_at_profile: list[bool] = []
    real_destroy = dist.destroy_process_group

    def spy(group: Any = None) -> None:
        destroyed.append(group)
        real_destroy(group)

    def collectives(job: Job, rank: int, world: int, events: Any) -> None:
        group.subgroups(job)

    def profile(job: Job, rank: int, world: int, events: Any) -> None:
        seen_at_profile.append("subgroups" in group._worker)
        seen_at_profile.append(len(destroyed) == 2 and all(g is not None for g in destroyed))

    monkeypatch.setattr(dist, "destroy_process_group", spy)
    monkeypatch.setattr(worker, "_rank_functions", lambda: {"collectives": collectives, "profile": profile})
    monkeypatch.setattr(sys, "stdin", io.StringIO("collectives\nprofile\n"))
    assert worker.run_worker(str(tmp_path / "job.json"), None, 0, 1, str(tmp_path / "rdv")) == 0
    assert seen_at_profile == [False, True]
    assert destroyed[-1] is None  # and the default group at the end, as before
