"""The report page as a reader sees it (issue 29 item 2): the leaderboard table fits a 1,400 px
window, its other columns collapsed under it, and a figure's axis is not stretched by one outlier
step so far that labels leave their bars."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from benchctl.report.data import CampaignData, CellData
from benchctl.report.html import PAGE_COLUMNS, page
from benchctl.report.plots import cost, figures, step_time
from benchctl.results.leaderboard import COLUMNS, TABLE_COLUMNS
from tests.test_report import _chromium, parse

pytestmark = pytest.mark.slow

ENV = {"NCCL_ALGO": "Ring", "NCCL_PROTO": "Simple", "NCCL_P2P_LEVEL": "NVL", "NCCL_IB_DISABLE": "1"}
FLAGS = ["numa_split", "pcie_downgraded:gpu3", "step_drift:+6%", "preempted_once", "clock_throttled:gpu5"]


def _row(rank: int | None, provider: str, market: str, cost_usd: float | None) -> dict[str, object]:
    """A leaderboard row as wide as real ones get: env vars, node facts, busbw, several flags."""
    done = cost_usd is not None
    return {**dict.fromkeys(COLUMNS), "rank": rank, "campaign": "h100-sweep-november",
            "cell": f"{provider}:H100_SXMx8:{market}:nccl_algo=ring,nccl_proto=simple", "provider": provider,
            "gpu": "H100_SXM", "count": 8, "nodes": 1, "interconnect": "NVLink (NV18)", "vcpus": 252,
            "numa": "2 nodes, GPUs split 4/4", "market": market, "env": ENV, "model": "nanochat-d26",
            "precision": "bf16", "compiled": True, "host_data": "synthetic", "hourly_usd": 23.92 if done else None,
            "step_time_ms": 702.4 if done else None, "step_time_p10_ms": 698.1 if done else None,
            "step_time_p90_ms": 731.9 if done else None, "optimizer_ms": 196.7 if done else None,
            "optimizer_share": 0.28 if done else None, "comm_share": 0.043 if done else None,
            "busbw_gbps": 361.2 if done else None, "busbw_bytes": 1 << 30, "target_steps": 17_410,
            "train_hours": 3.4 if done else None, "cost_to_train_usd": cost_usd,
            "cost_spot_usd": 61.2 if done else None, "cost_on_demand_usd": 81.33 if done else None,
            "flags": FLAGS if done else [], "status": "done" if done else "failed",
            "no_result": None if done else "no result: step 3 NaN loss at rank 5 (profile line 12)"}


def _campaign() -> CampaignData:
    rows = [_row(i + 1, p, m, 81.33 + 7 * i) for i, (p, m) in enumerate(
        [("runpod", "spot"), ("vast", "on-demand"), ("aws", "spot"), ("skypilot", "on-demand"), ("lambda", "spot")])]
    rows.append(_row(None, "ssh", "on-demand", None))
    return CampaignData(name="h100-sweep-november", budget_usd=500.0, spent_usd=42.0, model="nanochat-d26",
                        tokens_per_step=524_288, cells=[], spend_curve=[], spend_by_provider={}, now=0.0,
                        reference=None, phases=(), leaderboard=rows)


MEASURE = """<script>
const out = [];
for (const t of document.querySelectorAll('table')) {
  const box = t.parentElement;
  out.push({id: t.id, shown: t.checkVisibility(), right: t.getBoundingClientRect().right,
            width: t.scrollWidth, room: box.clientWidth});
}
const pre = document.createElement('pre');
pre.id = 'measured';
pre.textContent = JSON.stringify({tables: out, page: document.documentElement.scrollWidth,
                                  window: window.innerWidth});
document.body.appendChild(pre);
</script>"""
"""Appended to a copy of the page (the page itself has no script): the layout read once the tables
are laid out, written into the DOM that ``--dump-dom`` prints (no timing involved)."""


def test_the_leaderboard_fits_1400_px_with_every_column_collapsed_under_it(tmp_path: Path) -> None:
    data = _campaign()
    text = page([(data, figures(data, "c0"))], generated_at=0.0)
    parsed = parse(text)
    assert all(c in parsed.text_by_id["c0-leaderboard"] for c in PAGE_COLUMNS)
    assert all(c in parsed.text_by_id["c0-leaderboard-all"] for c in TABLE_COLUMNS)
    probe = tmp_path / "index.html"
    probe.write_text(text.replace("</body>", MEASURE + "</body>"))
    dom = _chromium("--dump-dom", "--window-size=1400,3000", "--force-device-scale-factor=1", probe.as_uri(),
                    cwd=tmp_path)
    assert dom.returncode == 0, dom.stderr[-2000:]
    found = re.search(r'<pre id="measured">(.*?)</pre>', dom.stdout, re.S)
    assert found is not None, dom.stdout[-2000:]
    measured = json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&"))
    assert measured["window"] == 1400
    tables = {t["id"]: t for t in measured["tables"]}
    board = tables["c0-leaderboard"]
    assert board["shown"] and not tables["c0-leaderboard-all"]["shown"]  # collapsed until opened
    assert board["width"] <= board["room"] and board["right"] <= 1400, board  # no sideways scrolling
    assert measured["page"] <= 1400


def _drawn(fig: Figure) -> tuple[Axes, FigureCanvasAgg]:
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    return fig.axes[0], canvas


def _labels_inside(fig: Figure, marker: str) -> list[str]:
    """The labels (texts containing ``marker``) drawn outside the axes, after an Agg draw."""
    ax, canvas = _drawn(fig)
    box = ax.get_window_extent(canvas.get_renderer())
    labels = [t for t in ax.texts if marker in t.get_text()]
    assert labels
    return [t.get_text() for t in labels
            if not (box.x0 - 1 <= t.get_window_extent(canvas.get_renderer()).x0
                    and t.get_window_extent(canvas.get_renderer()).x1 <= box.x1 + 1)]


def test_one_outlier_step_does_not_stretch_the_step_time_axis() -> None:
    steady = [100.0 + (k % 7) for k in range(40)]
    cells = [CellData(key="p:h100x8:spot", provider="p", state="done", ranks=8, step_times_ms=[*steady, 9_000.0]),
             CellData(key="q:h100x8:spot", provider="q", state="done", ranks=8,
                      step_times_ms=[s * 1.2 for s in steady]),
             CellData(key="r:h100x8:spot", provider="r", state="done", ranks=8,
                      step_times_ms=[s * 1.05 for s in steady])]
    data = CampaignData(name="c", budget_usd=10.0, spent_usd=0.0, model="nanochat-d2", tokens_per_step=512,
                        cells=cells, spend_curve=[], spend_by_provider={}, leaderboard=[], reference=None, now=0.0,
                        phases=("profile",))
    fig = step_time(data)
    ax = fig.axes[0]
    assert ax.get_xlim()[1] < 1_000, ax.get_xlim()  # the 9 s step does not set the axis
    assert not _labels_inside(fig, " ms, ")
    clipped = [t.get_text() for t in ax.texts if "9,000" in t.get_text()]
    assert clipped, [t.get_text() for t in ax.texts]  # the step off the axis is written, not lost


def test_one_outlier_cell_does_not_stretch_the_cost_axis() -> None:
    cells = [CellData(key=f"p{i}:h100x8:spot", provider=f"p{i}", state="done", ranks=8, cost_usd=80.0 + i,
                      hourly_usd=24.0) for i in range(11)]
    cells.append(CellData(key="slow:a10x1:spot", provider="slow", state="done", ranks=1, cost_usd=4_000.0,
                          hourly_usd=0.5))
    data = CampaignData(name="c", budget_usd=10.0, spent_usd=0.0, model="nanochat-d2", tokens_per_step=512,
                        cells=cells, spend_curve=[], spend_by_provider={}, leaderboard=[], reference=None, now=0.0,
                        phases=("profile",))
    fig = cost(data)
    ax = fig.axes[0]
    assert ax.get_xlim()[1] < 1_000, ax.get_xlim()
    assert not _labels_inside(fig, "/h, ")
    assert any("$4,000.00" in t.get_text() for t in ax.texts)
