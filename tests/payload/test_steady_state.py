"""Steady state of the profile (issue 28 item 4): the drift of the timed steps is recorded, and on GPU
unrecorded steps run after the warm-up until the clocks settle. The step series are the H200's
(docs/measurements/2026-11-25-gpu-h200/results-run1.json, run2.json: compiled, the compile step left out)."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchctl.payload.events import EventLog
from benchctl.payload.stats import drift, median, settled
from benchctl.payload.workloads.profile import SETTLE_MAX_S, SETTLE_MIN_S, summarize

D26_B8_MS = [305.2, 305.5, 314.4, 326.1, 322.6, 314.2, 319.5, 328.2, 317.3, 317.6, 326.8]
D26_B16_MS = [514.9, 517.7, 538.0, 529.3, 543.8, 530.9, 542.4, 532.8, 541.4, 536.2, 537.4]
D12_MS = [150.2, 150.9, 150.3, 151.7, 152.7, 151.1, 152.5, 153.1, 156.4, 153.7, 154.5, 152.7, 152.9, 153.3, 154.9,
          154.4, 154.8, 152.6, 152.8, 153.5, 154.1, 155.4, 154.9, 154.1, 152.5, 153.6, 153.6, 154.3, 153.9, 154.5,
          153.9, 154.1]


def test_drift_is_the_last_quarters_median_over_the_firsts() -> None:
    found = drift([t / 1000 for t in D26_B8_MS])  # quarters of 2 steps: 305.35 ms, then 322.2 ms
    assert found is not None
    assert found["first_quarter_median_s"] == pytest.approx(0.30535)
    assert found["last_quarter_median_s"] == pytest.approx(0.3222)
    assert found["drift"] == pytest.approx(0.3222 / 0.30535 - 1)  # +5.5 %: the H200's settling
    assert drift([1.0, 1.0, 1.0]) is None


def _steps_until_settled(series_ms: list[float], min_s: float) -> int | None:
    seconds = [t / 1000 for t in series_ms]
    for n in range(len(seconds) + 1):
        if settled(seconds[:n], min_s, SETTLE_MAX_S):
            return n
    return None


def test_settling_waits_out_the_h200s_drift() -> None:
    # d12 (150 ms steps; 4.9 s in all, so the rule is tried from 1 s): once two windows agree within
    # 1 %, the median of the steps after is within 1 % of the run's end
    n = _steps_until_settled(D12_MS, min_s=1.0)
    assert n is not None and sum(D12_MS[:n]) / 1000 >= 1.0
    rest = D12_MS[n:]
    assert rest and abs(median(rest) / median(D12_MS[-8:]) - 1) <= 0.01
    # the d26 series are too short to settle on the rule: never before SETTLE_MIN_S of steps
    assert not settled([t / 1000 for t in D26_B8_MS[:8]], SETTLE_MIN_S, SETTLE_MAX_S)
    assert settled([0.5] * 100, SETTLE_MIN_S, SETTLE_MAX_S)
    assert settled([SETTLE_MAX_S], SETTLE_MIN_S, SETTLE_MAX_S), "bounded: never more than SETTLE_MAX_S"
    # still rising by more than 1 % between windows: not settled
    rising = [0.5 * (1 + 0.004 * i) for i in range(20)]
    assert not settled(rising, SETTLE_MIN_S, SETTLE_MAX_S)


def test_the_profile_summary_records_timed_steps_and_drift(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    with EventLog(path) as log:
        log.emit("sample", phase="profile", step=0, step_time_s=91.7, warmup=True, timed_index=None)
        for i, ms in enumerate(D26_B8_MS):
            log.emit("sample", phase="profile", step=i + 9, step_time_s=ms / 1000, warmup=False, timed_index=i,
                     settle_steps=8, settle_s=4.1)
    summary = summarize(path)
    assert summary["timed_steps"] == len(D26_B8_MS)
    assert summary["drift"] == pytest.approx(0.3222 / 0.30535 - 1)
    assert summary["settle_steps"] == 8 and summary["settle_s"] == 4.1
