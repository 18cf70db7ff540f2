"""Predicted vs measured per leaderboard row (``benchctl leaderboard --predicted``).

Each row with a result is predicted as ``benchctl predict`` would predict its cell (the workload the
node ran, its GPU model, count, nodes, precision and interconnect class), from a calibration that
HOLDS OUT that cell: the published defaults plus every other measurement in the store, none of the
cell's own (its step time, nor its busbw). The error is then an honest one: the prediction never saw
the figure it is compared with. ``prediction_error`` = predicted / measured − 1; the summary is the
geometric mean of |ln(predicted / measured)| over the rows that have both, as ``exp(·) − 1``
(``scripts/bench_predict_error.py`` reports the same figure).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from sqlalchemy.engine import Engine

from benchctl.predict.calibration import Calibration, ComputePoint, default_points, defaults
from benchctl.predict.model import predict
from benchctl.predict.stored import store_points

COLUMNS = ("predicted_step_ms", "prediction_error")
"""The keys ``add_predictions`` gives each row (None where a row has no prediction)."""


def add_predictions(engine: Engine, rows: Sequence[dict[str, Any]]) -> None:
    """Set ``predicted_step_ms`` and ``prediction_error`` on every row (leaderboard rows: ``campaign``,
    ``cell``, ``count``, ``nodes``, ``step_time_ms``); None where the row has no result or its cell is
    no workload the model knows (not a nanochat preset, an unknown GPU model, a mixed precision)."""
    points, busbw = store_points(engine)
    by_origin = {p.origin: p for p in points}
    published = default_points()
    for row in rows:
        row["predicted_step_ms"] = row["prediction_error"] = None
        point = by_origin.get(f"{row['campaign']}/{row['cell']}")
        measured = row.get("step_time_ms")
        if point is None or not measured or point.precision not in ("bf16", "fp8"):
            continue
        held_out = Calibration([*published, *(p for p in points if p.origin != point.origin)],
                               [b for b in busbw if b.origin != point.origin])
        predicted = _predict(held_out, point, int(row["count"]), int(row.get("nodes") or 1))
        row["predicted_step_ms"] = round(predicted, 1)
        row["prediction_error"] = predicted / measured - 1


def _predict(calibration: Calibration, point: ComputePoint, count: int, nodes: int) -> float:
    wire = point.interconnect if point.interconnect in defaults()["interconnects"] and count * nodes > 1 else None
    work = point.workload
    return predict(work, calibration.inputs(point.gpu, count, nodes, point.precision, wire, work)).mid.step_ms


def geomean_error(rows: Sequence[dict[str, Any]]) -> tuple[float, int] | None:
    """(exp of the mean |ln(predicted / measured)| − 1, how many rows) over the rows with both; None without any."""
    logs = [abs(math.log1p(row["prediction_error"])) for row in rows if row.get("prediction_error") is not None]
    return (math.exp(sum(logs) / len(logs)) - 1, len(logs)) if logs else None


def summary(rows: Sequence[dict[str, Any]]) -> str:
    """The line under the table: the geomean error over the shown rows, and how their predictions were made."""
    found = geomean_error(rows)
    if found is None:
        return ("no cell has both a measured step time and a prediction\n"
                "(the model knows nanochat presets on known GPUs)")
    error, count = found
    return (f"geomean error {error:.1%} over {count} cell(s), each predicted without its own measurement\n"
            "(held out: published defaults and the store's other cells calibrate it)")
