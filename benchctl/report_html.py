"""The report page: one self-contained HTML file (inline CSS and SVG, no script, nothing fetched).

Every string that comes from the store is HTML-escaped here; the figures' SVG comes from
matplotlib (``benchctl.report_plots``), whose text it escapes itself. Each campaign is a
``<section>`` with id ``c<i>``; its figures are ``<svg id="c<i>-<figure>">``, its tables
``c<i>-leaderboard`` and ``c<i>-preflight``. ``write_page`` replaces ``DIR/index.html`` atomically.
"""

from __future__ import annotations

import html
import json
import os
import re
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchctl import step_split
from benchctl.check_status import CheckStatus
from benchctl.leaderboard import TABLE_COLUMNS, display_row
from benchctl.report_data import CampaignData, PreflightRun
from payload.checks import STATUS_ORDER, verdict

CSS = """
body{font-family:'DejaVu Sans',Helvetica,Arial,sans-serif;margin:24px auto;max-width:1320px;color:#222;
background:#fff;font-size:14px}
h1{font-size:24px;margin:0 0 4px}h2{font-size:20px;border-bottom:2px solid #0072B2;padding-bottom:4px;margin-top:32px}
h3{font-size:16px;margin:24px 0 6px}p.meta,p.note{color:#555;margin:4px 0}p.note{font-size:12.5px;max-width:1100px}
.summary{display:flex;gap:12px;flex-wrap:wrap;margin:12px 0}
.summary div{background:#F2F6FA;border-radius:6px;padding:8px 14px}.summary b{display:block;font-size:18px}
table{border-collapse:collapse;font-size:12.5px;margin:6px 0}
th,td{border:1px solid #ddd;padding:4px 7px;text-align:left}
th{background:#F2F6FA}td.num{text-align:right;font-variant-numeric:tabular-nums}
.pass{background:#D4EDDA}.warn{background:#FFF3CD}.fail{background:#F8D7DA}.skip{background:#EEEEEE;color:#777}
.noresult{color:#888;font-style:italic}figure{margin:6px 0 18px}svg{max-width:100%;height:auto}
ul.hints{font-size:12.5px;margin:4px 0}td.nowrap{white-space:nowrap}div.wide{overflow-x:auto}
"""


_NUMBER = re.compile(r"[-+\d.,%|() ]+")
SPLIT_NOTE = " ".join((step_split.__doc__ or "").replace("``", "").split())
"""The split's definition, from the module that defines it (``benchctl.step_split``)."""


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _breakable(value: Any) -> str:
    """Escaped, with line-break opportunities after ``_`` and ``:`` (names and cell keys are long)."""
    return _e(value).replace("_", "_<wbr>").replace(":", ":<wbr>")


def _text(value: Any) -> str:
    """A table value as text: ``-`` for nothing, lists and mappings joined, floats rounded."""
    if value is None or value == {} or value == []:
        return "-"
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in sorted(value.items()))
    if isinstance(value, list):
        return ", ".join(map(str, value))
    if isinstance(value, float):
        return f"{value:,.2f}" if abs(value) >= 100 else f"{value:.4g}"
    return str(value)


def _numeric(value: Any) -> bool:
    if isinstance(value, str):
        return bool(_NUMBER.fullmatch(value)) and any(c.isdigit() for c in value)
    return isinstance(value, int | float) and not isinstance(value, bool)


def leaderboard_table(rows: Sequence[dict[str, Any]], table_id: str) -> str:
    """The leaderboard rows as ``benchctl leaderboard`` shows them (``display_row``, whatever
    ``TABLE_COLUMNS`` lists), one per cell; a cell without a result says so in its status."""
    head = "".join(f"<th>{_breakable(c)}</th>" for c in TABLE_COLUMNS)
    body = []
    for row in rows:
        shown = display_row(row)
        if row.get("cost_to_train_usd") is None:
            last = "status" if "status" in TABLE_COLUMNS else TABLE_COLUMNS[-1]
            shown[last] = f"{_text(shown.get(last))}: no result"
        cells = []
        for column in TABLE_COLUMNS:
            value = shown.get(column)
            if _numeric(value):
                cells.append(f"<td class=num>{_e(_text(value))}</td>")
            else:
                noresult = ' class="noresult"' if str(value).endswith(": no result") else ""
                cells.append(f"<td{noresult}>{_breakable(_text(value))}</td>")
        body.append(f"<tr>{''.join(cells)}</tr>")
    return (f'<div class="wide"><table id="{table_id}"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody>'
            "</table></div>")


def _run_verdict(run: PreflightRun) -> str:
    return verdict([{"status": c.status} for c in run.checks.values() if c.status in STATUS_ORDER])


def preflight_table(data: CampaignData, table_id: str) -> str:
    """One row per attempt that ran preflight; one coloured column per check (details on hover, and
    listed under the table for every warn and fail)."""
    runs = [(cell.key, run) for cell in data.cells for run in cell.preflight]
    if not runs:
        return f'<p class="note" id="{table_id}">no preflight checks recorded yet</p>'
    names = list(dict.fromkeys(name for _, run in runs for name in run.checks))
    head = "".join(f"<th>{_breakable(n)}</th>" for n in ("cell", "attempt", "host", "outcome", "verdict", *names))
    body, hints = [], []
    for key, run in runs:
        overall = _run_verdict(run)
        cells = [f"<td>{_breakable(key)}</td>", f"<td>{run.attempt}</td>",
                 f'<td class="nowrap">{_e(run.host or "-")}</td>', f"<td>{_e(run.outcome or 'running')}</td>",
                 f'<td class="{_e(overall)}">{_e(overall)}</td>']
        for name in names:
            check = run.checks.get(name)
            if check is None:
                cells.append("<td>-</td>")
                continue
            detail = (f"observed: {json.dumps(check.observed)}; expected: {json.dumps(check.expected)}"
                      + (f"; {check.hint}" if check.hint else ""))
            cells.append(f'<td class="{_e(check.status)}" title="{_e(detail)}">{_e(check.status)}</td>')
            if check.status in (CheckStatus.WARN, CheckStatus.FAIL):
                hints.append(f"<li><b>{_e(key)}</b> attempt {run.attempt}, <b>{_e(name)}</b> {_e(check.status)}: "
                             f"{_e(detail)}</li>")
        body.append(f"<tr>{''.join(cells)}</tr>")
    listed = f'<ul class="hints">{"".join(hints)}</ul>' if hints else ""
    return (f'<div class="wide"><table id="{table_id}"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody>'
            f"</table></div>{listed}")


def _figure(svg: str, title: str, note: str) -> str:
    return f'<h3>{_e(title)}</h3><figure>{svg}</figure><p class="note">{_e(note)}</p>'


def campaign_section(data: CampaignData, figures: dict[str, str], prefix: str) -> str:
    done = sum(c.state == "done" for c in data.cells)
    share = data.spent_usd / data.budget_usd if data.budget_usd else 0.0
    summary = "".join(f"<div>{_e(label)}<b>{_e(value)}</b></div>" for label, value in (
        ("spent", f"${data.spent_usd:,.4f} of ${data.budget_usd:,.2f} ({share:.1%})"),
        ("cells done", f"{done} of {len(data.cells)}"),
        ("target", f"{data.model}, {data.tokens_per_step:,} tokens per step" if data.tokens_per_step
         else data.model)))
    baseline = ("The dashed line is the baseline: the fastest cell's median step time."
                + (f" The dotted line is a published reference: {data.reference[1]}." if data.reference else ""))
    return "".join([
        f'<section id="{prefix}"><h2>campaign {_e(data.name)}</h2><div class="summary">{summary}</div>',
        "<h3>leaderboard (cheapest cost-to-train first)</h3>",
        leaderboard_table(data.leaderboard, f"{prefix}-leaderboard"),
        _figure(figures["step_time"], "step time per cell", baseline),
        _figure(figures["split"], "where a step goes: optimizer and communication split", SPLIT_NOTE),
        _figure(figures["busbw"], "bus bandwidth against message size",
                "nccl-tests' busbw (out-of-place), slowest rank's time, log-scale sizes. Cells with one rank move "
                "no data between ranks and are left out."),
        _figure(figures["cost"], "cost to train", "median step time × target steps / 3600 × the billed hourly "
                "price of the attempts that measured the steps."),
        "<h3>preflight verdicts</h3>", preflight_table(data, f"{prefix}-preflight"),
        _figure(figures["spend_time"], "campaign spend over time",
                "Each attempt accrues its billed hourly price from launch to termination (until now while open)."),
        _figure(figures["spend_provider"], "spend by provider", "Stacked by how each attempt ended."),
        "</section>"])


def page(sections: Sequence[tuple[CampaignData, dict[str, str]]], generated_at: float) -> str:
    """The whole page: one section per (campaign data, its figures by name)."""
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(generated_at))
    names = ", ".join(data.name for data, _ in sections)
    body = "".join(campaign_section(data, figs, f"c{i}") for i, (data, figs) in enumerate(sections))
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>benchctl report: {_e(names)}</title>'
            f"<style>{CSS}</style></head><body><h1>benchctl report</h1>"
            f'<p class="meta">campaigns: {_e(names)} · generated {_e(when)}</p>{body}</body></html>\n')


def write_page(out_dir: Path, text: str) -> Path:
    """Write ``out_dir/index.html`` (``out_dir`` created): a temp file in the same folder, then a rename."""
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / "index.html"
    fd, temp = tempfile.mkstemp(prefix=".index.", suffix=".html.tmp", dir=out_dir)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(temp, 0o644)
        os.replace(temp, target)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    return target
