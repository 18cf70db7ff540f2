"""The report's figures: matplotlib (Agg), each returned as an inline ``<svg>`` string.

Every function takes a campaign's ``CampaignData`` and always returns a figure (one that says what
is missing when there is nothing to plot yet); ``shown`` says which figures a campaign has: none for
a phase its file does not run (an imported campaign: none without data). Cells are drawn in the
data's order (rank order, cheapest cost-to-train first) and keep one colour across figures; the data
holds the best ``PLOTTED_CELLS`` of a campaign (``benchctl.report.data``), the busbw figure the first
``BUSBW_CELLS`` of those, so no figure grows with the campaign. The
``<svg>`` element's id is ``{prefix}-{figure}``.
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import matplotlib
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.text import Text
from matplotlib.ticker import FuncFormatter

from benchctl.payload.comm.collective_math import format_bytes
from benchctl.payload.stats import median, percentile
from benchctl.report.data import BUSBW_CELLS, CampaignData, busbw_cells, busbw_ops, median_step_ms

matplotlib.use("Agg")  # figures are drawn off screen (``Figure`` needs no pyplot, no display)

PALETTE = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000")
"""Okabe–Ito: tells colours apart for colour-blind readers too."""
assert len(PALETTE) == BUSBW_CELLS  # each busbw line its own colour
PART_COLOURS = {"forward+backward": "#0072B2", "optimizer, not communication (phase 2)": "#E69F00",
                "optimizer communication (phases 1 + 3)": "#D55E00", "other (barriers, synchronisation)": "#BBBBBB"}
OUTCOME_COLOURS = {"done": "#009E73", "open": "#56B4E9", "preempted": "#E69F00", "bad_node": "#D55E00",
                   "failed": "#CC79A7"}
STYLE: dict[Any, Any] = {
    "svg.fonttype": "none", "text.parse_math": False, "font.size": 10, "axes.spines.top": False,
    "axes.spines.right": False, "axes.grid": True, "grid.color": "#E5E5E5", "axes.axisbelow": True,
    "legend.frameon": False}
FIGURES = ("step_time", "split", "busbw", "cost", "spend_time", "spend_provider")


FIGURE_PHASE = {"step_time": "profile", "split": "profile", "busbw": "collectives", "cost": "profile"}
"""The payload phase a figure's data comes from (the others are about spend: every campaign has them)."""
SMALL_SPREAD = 0.3
"""A value axis starts at zero unless every value lies within this fraction of the largest."""
OUTLIER = 1.5
"""A value axis ends at this × the 90th percentile of its values when the largest lies beyond that
(``robust_high``): one outlier does not squeeze every other bar into the axis' first tenth."""


def shown(data: CampaignData) -> tuple[str, ...]:
    """The figures the campaign's page has: a phase's figures only where its file runs that phase, the
    spend figures always (a campaign without phases in its file, an imported one whose nodes
    benchctl never launched: only the figures with something to draw)."""
    has_data = {"step_time": any(median_step_ms(c) is not None for c in data.cells),
                "split": any(c.split for c in data.cells), "busbw": any(c.busbw for c in data.cells),
                "cost": any(c.cost_usd is not None for c in data.cells),
                "spend_time": bool(data.spend_curve), "spend_provider": bool(data.spend_by_provider)}
    if data.phases is None:
        return tuple(name for name in FIGURES if has_data[name])
    return tuple(name for name in FIGURES if name not in FIGURE_PHASE or FIGURE_PHASE[name] in data.phases)


def figures(data: CampaignData, prefix: str) -> dict[str, str]:
    """The campaign's figures (``shown``), by name, as ``<svg>`` strings."""
    makers: dict[str, Callable[[CampaignData], Figure]] = {
        "step_time": step_time, "split": split, "busbw": busbw, "cost": cost, "spend_time": spend_time,
        "spend_provider": spend_provider}
    out = {}
    for name in shown(data):
        with _style(f"{prefix}-{name}"):
            out[name] = _svg(makers[name](data))
    return out


@contextmanager
def _style(svg_id: str) -> Iterator[None]:
    with matplotlib.rc_context({**STYLE, "svg.id": svg_id, "svg.hashsalt": svg_id}):
        yield


def _svg(fig: Figure) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight",
                metadata={"Creator": None, "Date": None, "Format": None, "Type": None})
    text = buf.getvalue()
    return text[text.index("<svg"):]


def _cell_figure(n_cells: int, width: float = 12.0) -> tuple[Figure, Axes]:
    fig = Figure(figsize=(width, 1.3 + 0.45 * max(n_cells, 1)))
    return fig, fig.add_subplot()


def _below(fig: Figure, inches: float = 0.55) -> float:
    """Axes-fraction y of a point ``inches`` under the axes (below the x label) of a one-axes figure."""
    height = fig.get_figheight() * (fig.subplotpars.top - fig.subplotpars.bottom)
    return -inches / height


def _colour(index: int) -> str:
    return PALETTE[index % len(PALETTE)]


def _empty(ax: Axes, message: str) -> None:
    ax.set_axis_off()
    ax.text(0.5, 0.5, message, ha="center", va="center", transform=ax.transAxes, color="#666666")


def _cell_axis(ax: Axes, keys: list[str]) -> None:
    ax.set_yticks(range(len(keys)), keys)
    ax.set_ylim(len(keys) - 0.5, -0.5)  # first cell on top
    ax.grid(axis="y", visible=False)


def _vs_best(value: float, best: float, word: str = "best") -> str:
    """``best`` for the best value, else ``+x.x % vs best``."""
    if best <= 0 or value <= best:
        return word
    return f"+{(value / best - 1) * 100:.1f} % vs {word}"


def _value_axis(ax: Axes, low: float, high: float, unit: str, room: float = 0.4) -> str:
    """Limit the x axis to [start, high + room]: start at 0, or, when every value lies within
    ``SMALL_SPREAD`` of the largest (differences of a few % would be invisible from 0), just below the
    smallest, marked broken (``//``) at its left end. Returns the axis label's note on where it starts."""
    start = 0.0
    if low > 0 and (high - low) <= SMALL_SPREAD * high:
        margin = max(high - low, 0.02 * low)
        below = low - margin
        step = 10 ** math.floor(math.log10(margin))  # round to the spread's order of magnitude
        start = max(0.0, math.floor(below / step) * step)
    ax.set_xlim(start, high + (high - start) * room)
    if start == 0:
        return ""
    ax.text(0.012, 0.005, "//", transform=ax.transAxes, ha="center", va="bottom", fontsize=11, fontweight="bold",
            color="#333333")
    return f"; axis broken: starts at {start:,.4g} {unit}, not 0, so that small differences show"


def robust_high(values: list[float], keep: float = 0.0) -> float:
    """The largest value an axis shows whole: the largest of ``values``, or ``OUTLIER`` × their 90th
    percentile when the largest lies beyond that, never below ``keep`` (what must show whole). With
    few values the 90th percentile is near the largest itself, so only a value far from most of
    many is cut."""
    top = max(values)
    bound = max(OUTLIER * percentile(values, 90), keep)
    return top if top <= bound else bound


def _fit_labels(fig: Figure, ax: Axes, labels: list[Text], margin: float = 0.01) -> None:
    """Extend the x axis to the right until every left-aligned ``label`` (placed at a data x) ends
    inside the axes: text keeps its size in pixels, so the span one label needs is known at once."""
    if not labels:
        return
    renderer = FigureCanvasAgg(fig).get_renderer()
    width = ax.get_window_extent(renderer).width
    start, end = ax.get_xlim()
    need = end
    for label in labels:
        share = label.get_window_extent(renderer).width / width
        if share < 1 - margin:
            need = max(need, start + (label.get_position()[0] - start) / (1 - margin - share))
    ax.set_xlim(start, need)


def _off_axis(ax: Axes, row: int, colour: str) -> None:
    """The marker at the right end of the axis for a value beyond it (``robust_high``)."""
    ax.plot([1.0], [row], marker=">", markersize=8, color=colour, markeredgecolor="#333333",
            transform=ax.get_yaxis_transform(), clip_on=False, zorder=4)


def step_time(data: CampaignData) -> Figure:
    """Timed step times per cell (dots), median (bar) and p10–p90 (whisker), each labelled with its
    median and ``+x % vs best`` (the fastest median); baseline: the fastest cell's median, and a
    published reference when the campaign's model has one. The axis starts near the smallest value
    when the differences are small (``_value_axis``) and ends before an outlier step
    (``robust_high``; every bar and whisker shows whole): such steps are a marker at its right end,
    their count and the slowest written in their cell's label."""
    fig, ax = _cell_figure(len(data.cells))
    medians = [median(c.step_times_ms) for c in data.cells if c.step_times_ms]
    medians += [c.step_summary_ms[1] for c in data.cells if not c.step_times_ms and c.step_summary_ms]
    if not medians:
        _empty(ax, "no timed profile steps yet")
        return fig
    best = min(medians)
    summaries: dict[int, tuple[float, float, float]] = {}
    for i, cell in enumerate(data.cells):
        if cell.step_times_ms:
            summaries[i] = (percentile(cell.step_times_ms, 10), percentile(cell.step_times_ms, 50),
                            percentile(cell.step_times_ms, 90))
        elif cell.step_summary_ms:  # imported: no samples, only the summary
            summaries[i] = cell.step_summary_ms
    whole = [p90 for _, _, p90 in summaries.values()] + ([data.reference[0]] if data.reference else [])
    values = [t for c in data.cells for t in c.step_times_ms] + [v for s in summaries.values() for v in s] + whole
    high = robust_high(values, keep=max(whole))
    low = min([best, *values])
    note = _value_axis(ax, low, high, "ms")
    labels = []
    for i, cell in enumerate(data.cells):
        if i not in summaries:
            ax.text(0, i, "  no timed steps", va="center", color="#666666", transform=ax.get_yaxis_transform())
            continue
        p10, p50, p90 = summaries[i]
        times = [t for t in cell.step_times_ms if t <= high]
        beyond = [t for t in cell.step_times_ms if t > high]
        ax.barh(i, p50, height=0.55, color=_colour(i), alpha=0.35)
        ax.plot([p10, p90], [i, i], color=_colour(i), linewidth=2)
        jitter = [(k % 5 - 2) * 0.06 for k in range(len(times))]
        if times:
            ax.scatter(times, [i + j for j in jitter], s=12, color=_colour(i), zorder=3)
        off = (f"; {len(beyond)} step{'s' if len(beyond) > 1 else ''} off the axis, the slowest "
               f"{max(beyond):,.0f} ms ▸" if beyond else "")
        labels.append(ax.text(max([p90, *times]), i, f"  {p50:,.1f} ms, {_vs_best(p50, best)}{off}", va="center",
                              fontsize=9))
        if beyond:
            _off_axis(ax, i, _colour(i))
    ax.axvline(best, color="#333333", linestyle="--", linewidth=1,
               label=f"baseline: fastest cell's median {best:,.1f} ms")
    if data.reference is not None:
        ax.axvline(data.reference[0], color="#D55E00", linestyle=":", linewidth=1.5, label=data.reference[1])
    _cell_axis(ax, [c.key for c in data.cells])
    _fit_labels(fig, ax, labels)
    clipped = "; ▸ = steps beyond the axis' end" if any(t > high for c in data.cells for t in c.step_times_ms) else ""
    ax.set_xlabel(f"step time (ms): dots = timed steps, bar = median, whisker = p10–p90{note}{clipped}")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, _below(fig)), ncol=2)
    return fig


def split(data: CampaignData) -> Figure:
    """Median step split per cell (``benchctl.results.step_split``), stacked, in ms: forward+backward, the
    optimizer's non-communication part (its median less the communication median), its communication,
    and the rest of the median step (≥ 0)."""
    fig, ax = _cell_figure(len(data.cells))
    if not any(c.split for c in data.cells):
        _empty(ax, "no phase timings yet")
        return fig
    widest = 0.0
    for i, cell in enumerate(data.cells):
        if cell.split is None:
            ax.text(0, i, "  no phase timings", va="center", color="#666666")
            continue
        s = cell.split
        parts = (s.fwd_bwd_s, max(0.0, s.optimizer_s - s.comm_s), s.comm_s,
                 max(0.0, s.step_s - s.fwd_bwd_s - s.optimizer_s))
        left = 0.0
        for (part, colour), seconds in zip(PART_COLOURS.items(), parts, strict=True):
            ax.barh(i, seconds * 1000, left=left, height=0.6, color=colour, label=part if i == _first_split(data)
                    else None)
            left += seconds * 1000
        widest = max(widest, left)
        ax.text(left, i, f" optimizer {s.optimizer_share:.0%} of the step, its communication "
                f"{s.comm_share:.0%} of the step", va="center", fontsize=9)
    _cell_axis(ax, [c.key for c in data.cells])
    ax.set_xlim(0, widest * 1.7 or 1.0)  # room for the labels
    ax.set_xlabel("median time per step (ms); phases as the GPU's compute stream reached them; "
                  "shares are of the median step time")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, _below(fig)), ncol=2)
    return fig


def _first_split(data: CampaignData) -> int:
    return next(i for i, c in enumerate(data.cells) if c.split is not None)


def _bytes_label(value: float, _pos: Any = None) -> str:
    return format_bytes(value)


def busbw(data: CampaignData) -> Figure:
    """busbw against message size, one panel per collective (``busbw_ops``: a bounded number), one
    line per cell with ≥ 2 ranks (log x), for the first ``BUSBW_CELLS`` such cells."""
    drawn = busbw_cells(data)
    ops, _ = busbw_ops(data)
    columns = max(1, min(3, len(ops)))
    rows = max(1, -(-len(ops) // columns))
    fig = Figure(figsize=(4.4 * columns if ops else 12.0, 3.4 * rows + 0.6))
    if not ops:
        _empty(fig.add_subplot(), "no collectives measured on a cell with 2 or more ranks yet")
        return fig
    axes = fig.subplots(rows, columns, squeeze=False)
    for k, ax in enumerate(axes.flat):
        if k >= len(ops):
            ax.set_axis_off()
            continue
        op = ops[k]
        for i in drawn:
            cell = data.cells[i]
            points = cell.busbw.get(op)
            if points:
                ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", markersize=3,
                        color=_colour(i), label=cell.key)
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(FuncFormatter(_bytes_label))
        ax.set_title(op if len(op) <= 40 else op[:39] + "…")
        ax.set_xlabel("message size (bytes)")
        ax.set_ylabel("busbw (GB/s)")
    legend: dict[str, Any] = {}  # every plotted cell once, whichever panel it is on
    for ax in axes.flat:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            legend.setdefault(label, handle)
    handles, labels = list(legend.values()), list(legend)
    fig.legend(handles, labels, loc="lower center", ncol=min(3, max(1, len(labels))), bbox_to_anchor=(0.5, -0.02))
    fig.subplots_adjust(bottom=0.28 if rows == 1 else 0.15, wspace=0.3, hspace=0.45)
    return fig


def cost(data: CampaignData) -> Figure:
    """Cost-to-train per cell, with its price and ``+x % vs cheapest``; cells without a result say so.
    The axis starts near the cheapest when the differences are small (``_value_axis``) and ends
    before an outlier (``robust_high``): its bar runs to the axis' end, marked, its label inside."""
    fig, ax = _cell_figure(len(data.cells))
    costs = [c.cost_usd for c in data.cells if c.cost_usd is not None]
    if not costs:
        _empty(ax, "no cell has a result yet")
        return fig
    cheapest = min(costs)
    high = robust_high(costs)
    note = _value_axis(ax, cheapest, high, "USD", room=0.6)
    labels, beyond = [], []
    for i, cell in enumerate(data.cells):
        if cell.cost_usd is None:
            ax.text(0, i, f"  no result ({cell.state})", va="center", color="#666666",
                    transform=ax.get_yaxis_transform())
            continue
        text = (f"${cell.cost_usd:,.2f} at ${cell.hourly_usd or 0:,.2f}/h, "
                f"{_vs_best(cell.cost_usd, cheapest, 'cheapest')}")
        if cell.cost_usd > high:
            beyond.append((i, text))
            continue
        ax.barh(i, cell.cost_usd, height=0.6, color=_colour(i))
        labels.append(ax.text(cell.cost_usd, i, f" {text}", va="center", fontsize=9))
    _cell_axis(ax, [c.key for c in data.cells])
    _fit_labels(fig, ax, labels)
    for i, text in beyond:  # drawn to the axis' final end
        ax.barh(i, ax.get_xlim()[1], height=0.6, color=_colour(i))
        ax.text(0.985, i, f"{text}, off the axis ", va="center", ha="right", fontsize=9,
                transform=ax.get_yaxis_transform(), bbox={"facecolor": "white", "alpha": 0.85, "edgecolor": "none",
                                                          "pad": 1.5})
        _off_axis(ax, i, _colour(i))
    clipped = "; ▸ = beyond the axis' end" if beyond else ""
    ax.set_xlabel(f"cost to train {data.model} (USD){note}{clipped}")
    return fig


def _time_unit(span_s: float) -> tuple[str, float]:
    return ("s", 1.0) if span_s < 180 else ("min", 60.0) if span_s < 3 * 3600 else ("h", 3600.0)


def spend_time(data: CampaignData) -> Figure:
    """Cumulative spend since the first launch; the budget line once spend reaches a quarter of it."""
    fig = Figure(figsize=(12.0, 3.4))
    ax = fig.add_subplot()
    if not data.spend_curve:
        _empty(ax, "no node launched yet")
        return fig
    start = data.spend_curve[0][0]
    unit, scale = _time_unit(data.spend_curve[-1][0] - start)
    xs = [(t - start) / scale for t, _ in data.spend_curve]
    ax.plot(xs, [usd for _, usd in data.spend_curve], color="#0072B2", marker="o", markersize=3)
    ax.fill_between(xs, [usd for _, usd in data.spend_curve], color="#0072B2", alpha=0.12)
    if data.spent_usd >= 0.25 * data.budget_usd:
        ax.axhline(data.budget_usd, color="#D55E00", linestyle="--", label=f"budget ${data.budget_usd:,.2f}")
        ax.legend(loc="upper left")
    ax.set_xlabel(f"time since the first launch ({unit})")
    ax.set_ylabel("spent (USD)")
    ax.set_title(f"${data.spent_usd:,.4f} spent of a ${data.budget_usd:,.2f} budget", fontsize=10)
    ax.set_ylim(bottom=0)
    return fig


def spend_provider(data: CampaignData) -> Figure:
    """Spend per provider, stacked by attempt outcome (``open`` = still running)."""
    providers = sorted(data.spend_by_provider)
    fig, ax = _cell_figure(len(providers))
    if not providers:
        _empty(ax, "no node launched yet")
        return fig
    outcomes = sorted({o for per in data.spend_by_provider.values() for o in per})
    for i, provider in enumerate(providers):
        left = 0.0
        for outcome in outcomes:
            usd = data.spend_by_provider[provider].get(outcome, 0.0)
            ax.barh(i, usd, left=left, height=0.6, color=OUTCOME_COLOURS.get(outcome, "#999999"),
                    label=outcome if i == 0 else None)
            left += usd
        ax.text(left, i, f" ${left:,.4f}", va="center", fontsize=9)
    _cell_axis(ax, providers)
    ax.set_xlim(0, max(sum(p.values()) for p in data.spend_by_provider.values()) * 1.3 or 1.0)
    ax.set_xlabel("spent (USD), by attempt outcome")
    ax.legend(loc="lower right", fontsize=9)
    return fig
