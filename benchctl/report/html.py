"""The report page: one self-contained HTML file (inline CSS and SVG, no script, nothing fetched).

Every string that comes from the store is HTML-escaped here; the figures' SVG comes from
matplotlib (``benchctl.report.plots``), whose text it escapes itself. Each campaign is a
``<section>`` with id ``c<i>``; its figures are ``<svg id="c<i>-<figure>">``, its tables
``c<i>-leaderboard`` and ``c<i>-preflight``; each part's heading has the id ``<part id>-title``.
The page of every campaign (``overview``) starts with a table of contents (``<nav id="toc">``) and
a ranking across the campaigns, one table per model (``<section id="ranking">``). The page cites
no file: a reader may have only the page. ``write_page`` replaces ``DIR/index.html`` atomically.
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

from benchctl.payload.node.checks import STATUS_ORDER, verdict
from benchctl.payload.workloads.presets import UPSTREAM_DIFFERENCES
from benchctl.report.data import BUSBW_CELLS, TABLE_ROWS, CampaignData, PreflightRun, busbw_cells, busbw_ops
from benchctl.results import step_split
from benchctl.results.check_status import CheckStatus
from benchctl.results.leaderboard import TABLE_COLUMNS, display_row

CSS = """
body{font-family:'DejaVu Sans',Helvetica,Arial,sans-serif;margin:24px auto;max-width:1320px;color:#222;
background:#fff;font-size:14px}
h1{font-size:24px;margin:0 0 4px}h2{font-size:20px;border-bottom:2px solid #0072B2;padding-bottom:4px;margin-top:32px}
h3{font-size:16px;margin:24px 0 6px}p.meta,p.note{color:#555;margin:4px 0}p.note{font-size:12.5px;max-width:1100px}
.summary{display:flex;gap:12px;flex-wrap:wrap;margin:12px 0}
.summary div{background:#F2F6FA;border-radius:6px;padding:8px 14px}.summary b{display:block;font-size:18px}
table{border-collapse:collapse;font-size:12.5px;margin:6px 0}
th,td{border:1px solid #ddd;padding:4px 7px;text-align:left}
th{background:#F2F6FA}td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.pass{background:#D4EDDA}.warn{background:#FFF3CD}.fail{background:#F8D7DA}.skip{background:#EEEEEE;color:#777}
.noresult{color:#888;font-style:italic}figure{margin:6px 0 18px}svg{max-width:100%;height:auto}
ul.hints{font-size:12.5px;margin:4px 0}td.nowrap{white-space:nowrap}div.wide{overflow-x:auto}
nav#toc{background:#F7F9FB;border:1px solid #E1E8EF;border-radius:6px;padding:6px 18px;margin:12px 0;font-size:13px}
nav#toc ul{margin:2px 0;padding-left:18px}nav#toc a{color:#0060A0;text-decoration:none}
details{margin:2px 0 8px;font-size:12.5px}summary{cursor:pointer;color:#0060A0}
"""


_NUMBER = re.compile(r"[-+\d.,%|() ]+")
SPLIT_NOTE = " ".join(re.sub(r"\s*\(``[\w.]+``[^)]*\)", "", step_split.__doc__ or "").replace("``", "").split())
"""The split's definition, from the module that defines it (``benchctl.results.step_split``), less its
references to other modules (the reader of the page may not have them)."""


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


PAGE_COLUMNS = ("rank", "model", "cell", "provider", "configuration", "market", "$/hr", "step ms", "cost-to-train $",
                "flags", "status")
"""The leaderboard columns the page shows at first (they fit 1,400 px; the cell names the figures'
rows); every one of ``TABLE_COLUMNS`` is in a second table, collapsed under the first (``<details>``)."""


def leaderboard_table(rows: Sequence[dict[str, Any]], table_id: str,
                      columns: Sequence[str] = TABLE_COLUMNS) -> str:
    """The leaderboard rows as ``benchctl leaderboard`` shows them (``display_row``), the ``columns``
    of ``TABLE_COLUMNS``, one row per cell; a cell without a result says so in its status."""
    head = "".join(f"<th>{_breakable(c)}</th>" for c in columns)
    body = []
    for row in rows:
        shown = display_row(row)
        if row.get("cost_to_train_usd") is None:
            last = "status" if "status" in columns else columns[-1]
            shown[last] = f"{_text(shown.get(last))}: no result"
        cells = []
        for column in columns:
            value = shown.get(column)
            if _numeric(value):
                cells.append(f"<td class=num>{_e(_text(value))}</td>")
            else:
                noresult = ' class="noresult"' if str(value).endswith(": no result") else ""
                cells.append(f"<td{noresult}>{_breakable(_text(value))}</td>")
        body.append(f"<tr>{''.join(cells)}</tr>")
    return (f'<div class="wide"><table id="{table_id}"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody>'
            "</table></div>")


def leaderboard_tables(rows: Sequence[dict[str, Any]], table_id: str) -> str:
    """The leaderboard as the page shows it: ``PAGE_COLUMNS`` (``table_id``), then every column
    (``table_id-all``) in a ``<details>`` collapsed by default."""
    return (leaderboard_table(rows, table_id, PAGE_COLUMNS)
            + f'<details id="{table_id}-details"><summary>all {len(TABLE_COLUMNS)} columns (node, p10-p90, '
            "optimizer, communication, busbw, target steps, ...)</summary>"
            + leaderboard_table(rows, f"{table_id}-all") + "</details>")


def _run_verdict(run: PreflightRun) -> str:
    return verdict([{"status": c.status} for c in run.checks.values() if c.status in STATUS_ORDER])


def preflight_table(data: CampaignData, table_id: str) -> str:
    """One row per attempt that ran preflight; one coloured column per check (details on hover, and
    listed under the table for every warn and fail)."""
    runs = [(cell.key, run) for cell in (*data.cells, *data.preflight_only) for run in cell.preflight]
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


def _heading(part_id: str, title: str) -> str:
    return f'<h3 id="{part_id}-title">{_e(title)}</h3>'


def busbw_note(data: CampaignData) -> str:
    """What the busbw figure plots, from the data it plots: which cells, which placement, and why the
    others are not there."""
    drawn = busbw_cells(data)
    plotted = [data.cells[i].key for i in drawn]
    single = [c.key for c in data.cells if c.ranks <= 1]
    unmeasured = [c.key for c in data.cells if c.ranks > 1 and not c.busbw]
    later = [c.key for i, c in enumerate(data.cells) if c.ranks > 1 and c.busbw and i not in drawn]
    in_place = sorted({op for c in data.cells if c.ranks > 1 for op in c.busbw_in_place})
    placement = "out-of-place" + (f" (in-place for {', '.join(in_place)}: sizes measured only in place)"
                                  if in_place else "")
    parts = [f"Bus bandwidth (busbw: algbw × the collective's bus factor, as nccl-tests defines it) of the "
             f"campaign's own collectives sweep, {placement}, from the time averaged over the ranks as nccl-tests "
             f"reports it (each sample also carries the slowest rank's, busbw_slowest_gbps); message sizes on a "
             f"log scale. Plotted: {', '.join(plotted) or 'no cell yet'}."]
    if single:
        parts.append(f"Not plotted, one rank (no data moves between ranks): {', '.join(single)}.")
    if unmeasured:
        parts.append(f"Not plotted, no collectives measured: {', '.join(unmeasured)}.")
    if later:
        parts.append(f"Not plotted, to keep the lines apart (the first {BUSBW_CELLS} in rank order are): "
                     f"{', '.join(later)}.")
    if left_out := busbw_ops(data)[1]:
        parts.append(f"Not plotted, {left_out}.")
    return " ".join(parts)


def _cells_shown_note(data: CampaignData) -> str:
    """Which cells the per-cell figures show when the campaign has more than they hold."""
    if data.cells_total <= len(data.cells):
        return ""
    return (f" The figure shows the best {len(data.cells)} of the campaign's {data.cells_total:,} cells in rank "
            "order; the leaderboard table lists more.")


def _parts(data: CampaignData, figures: dict[str, str]) -> list[tuple[str, str]]:
    """(part id suffix, title) of the parts a campaign's section has, in page order."""
    titles = {"step_time": "step time per cell (rank order)",
              "split": "where a step goes: optimizer and communication split",
              "busbw": "bus bandwidth against message size", "cost": "cost to train (rank order)",
              "preflight": "preflight verdicts", "spend_time": "campaign spend over time",
              "spend_provider": "spend by provider"}
    runs_preflight = ("preflight" in data.phases if data.phases is not None
                      else any(c.preflight for c in data.cells))
    parts = [("leaderboard", "leaderboard (cheapest cost-to-train first)")]
    for name in ("step_time", "split", "busbw", "cost", "preflight", "spend_time", "spend_provider"):
        if name in figures or (name == "preflight" and runs_preflight):
            parts.append((name, titles[name]))
    return parts


def campaign_section(data: CampaignData, figures: dict[str, str], prefix: str) -> str:
    done = data.cells_done
    share = data.spent_usd / data.budget_usd if data.budget_usd else 0.0
    summary = "".join(f"<div>{_e(label)}<b>{_e(value)}</b></div>" for label, value in (
        ("spent", f"${data.spent_usd:,.4f} of ${data.budget_usd:,.2f} ({share:.1%})"),
        ("cells done", f"{done:,} of {data.cells_total:,}"),
        ("target", f"{data.model}, {data.tokens_per_step:,} tokens per step" if data.tokens_per_step
         else data.model)))
    notes = {
        "step_time": "Cells in rank order (cheapest cost-to-train first); each label gives the median and how much "
                     "slower it is than the fastest median. The dashed line is the baseline: the fastest cell's "
                     "median step time." + (f" The dotted line is a measured reference: {data.reference[1]}."
                                            if data.reference else "") + _cells_shown_note(data),
        "split": SPLIT_NOTE + _cells_shown_note(data), "busbw": busbw_note(data),
        "cost": "Median step time × target steps / 3600 × the billed hourly price of the attempts that measured "
                "the steps; each label says how much dearer the cell is than the cheapest." + _cells_shown_note(data),
        "spend_time": "Each attempt accrues its billed hourly price from launch to termination (until now while "
                      "open).",
        "spend_provider": "Stacked by how each attempt ended."}
    out = [f'<section id="{prefix}"><h2>campaign {_e(data.name)}</h2><div class="summary">{summary}</div>']
    for name, title in _parts(data, figures):
        out.append(_heading(f"{prefix}-{name}", title))
        if name == "leaderboard":
            out.append(leaderboard_tables(data.leaderboard, f"{prefix}-leaderboard"))
            if data.leaderboard_omitted:
                out.append(f'<p class="note" id="{prefix}-leaderboard-more">{data.leaderboard_omitted:,} more cells '
                           f"are not listed (the table holds the first {TABLE_ROWS} ranks of each model and target, "
                           f"and {TABLE_ROWS} cells without a result at most): `benchctl leaderboard --campaign "
                           f"{_e(data.name)} --format csv` lists every one.</p>")
            if data.model.startswith("nanochat-"):
                out.append(f'<p class="note" id="{prefix}-workload">{_e(UPSTREAM_DIFFERENCES)}</p>')
        elif name == "preflight":
            out.append(preflight_table(data, f"{prefix}-preflight"))
        else:
            out.append(f'<figure>{figures[name]}</figure><p class="note">{_e(notes[name])}</p>')
    out.append("</section>")
    return "".join(out)


def contents(sections: Sequence[tuple[CampaignData, dict[str, str]]]) -> str:
    """The table of contents: the ranking, then each campaign and its parts."""
    items = ['<li><a href="#ranking">ranking across campaigns</a></li>']
    for i, (data, figs) in enumerate(sections):
        sub = "".join(f'<li><a href="#c{i}-{name}-title">{_e(title)}</a></li>' for name, title in _parts(data, figs))
        items.append(f'<li><a href="#c{i}">campaign {_e(data.name)}</a><ul>{sub}</ul></li>')
    return f'<nav id="toc"><b>contents</b><ul>{"".join(items)}</ul></nav>'


RANKING_COLUMNS = ("rank", "campaign", "cell", "configuration", "market", "$/hr", "step ms (median)",
                   "cost-to-train $", "vs cheapest")


def ranking(sections: Sequence[tuple[CampaignData, dict[str, str]]]) -> str:
    """Every cell with a result across the campaigns, cheapest cost-to-train first, one table per rank
    group as ``benchctl leaderboard`` ranks (``rank_group``: model, target steps, matmul precision): a
    cost to train one model does not rank against another's, nor one over 17,410 steps against one
    over 14,889, nor an fp8 step against a bf16 one."""
    from benchctl.results.leaderboard import rank_group

    by_group: dict[tuple[str, int, str], list[dict[str, Any]]] = {}
    for data, _ in sections:
        for row in data.leaderboard:
            if row.get("cost_to_train_usd") is not None:
                model, steps, precision = rank_group({**row, "model": row.get("model") or data.model,
                                                      "target_steps": row.get("target_steps")})
                by_group.setdefault((str(model), steps or 0, str(precision or "")), []).append(row)
    out = ['<section id="ranking"><h2>ranking across campaigns</h2><p class="note">Every cell with a result, '
           "cheapest cost-to-train first; one table per model, target steps and precision, as "
           "<code>benchctl leaderboard</code> ranks: costs of training different models or over different "
           "targets do not compare, nor fp8 steps with bf16 ones.</p>"]
    if not by_group:
        out.append('<p class="note">no cell has a result yet</p>')
    targets = {model: {t for m, t, _ in by_group if m == model} for model, _, _ in by_group}
    precisions = {model: {p for m, _, p in by_group if m == model} for model, _, _ in by_group}
    for k, ((model, steps, precision), rows) in enumerate(sorted(by_group.items())):
        rows.sort(key=lambda r: (float(r["cost_to_train_usd"]), str(r.get("campaign")), str(r.get("cell"))))
        more = len(rows) - TABLE_ROWS
        rows = rows[:TABLE_ROWS]
        cheapest = float(rows[0]["cost_to_train_usd"])
        body = []
        for rank, row in enumerate(rows, start=1):
            cost = float(row["cost_to_train_usd"])
            dearer = "cheapest" if cost <= cheapest or cheapest <= 0 else f"+{(cost / cheapest - 1) * 100:.1f} %"
            values = (rank, row.get("campaign"), row.get("cell"), f"{row.get('gpu')}×{row.get('count')}",
                      row.get("market"), _money(row.get("hourly_usd")), _ms(row.get("step_time_ms")),
                      _money(cost), dearer)
            body.append("<tr>" + "".join(f"<td class=num>{_e(v)}</td>" if _numeric(v) else f"<td>{_breakable(v)}</td>"
                                         for v in values) + "</tr>")
        head = "".join(f"<th>{_e(c)}</th>" for c in RANKING_COLUMNS)
        said = [f"{steps:,} target steps"] if len(targets[model]) > 1 else []
        said += [precision or "precision not recorded"] if len(precisions[model]) > 1 else []
        title = f"{model}, {', '.join(said)}" if said else model
        out.append(f'<h3 id="ranking-{k}-title">{_e(title)}</h3><div class="wide"><table id="ranking-{k}">'
                   f'<thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table></div>')
        if more > 0:
            out.append(f'<p class="note">{more:,} more cells of {_e(model)} are not listed: `benchctl leaderboard '
                       f"--model {_e(model)} --format csv` lists every one.</p>")
    out.append("</section>")
    return "".join(out)


def _money(value: Any) -> str:
    return "-" if value is None else f"{float(value):,.2f}"


def _ms(value: Any) -> str:
    return "-" if value is None else f"{float(value):,.1f}"


def page(sections: Sequence[tuple[CampaignData, dict[str, str]]], generated_at: float, overview: bool = False,
         ) -> str:
    """The whole page: one section per (campaign data, its figures by name); the page of every
    campaign (``overview``) adds the table of contents and the ranking across campaigns first."""
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(generated_at))
    names = ", ".join(data.name for data, _ in sections)
    body = "".join(campaign_section(data, figs, f"c{i}") for i, (data, figs) in enumerate(sections))
    if overview:
        body = contents(sections) + ranking(sections) + body
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
