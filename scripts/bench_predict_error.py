"""Prediction error on held-out measurements (issue 30 item 4): predicted vs measured step time.

Every measured step is predicted by a calibration that does not contain it, nor any point of the
same model on the same GPU model:
- the H200 profiles at world size 1 (docs/measurements/2026-11-25-gpu-h200.md): each predicted
  from the other models' H200 points (leave one model out);
- nanochat d26 on 8×H100 SXM, published by upstream (REFERENCE.md: dev/LOG.md's bf16 ≈ 630K tok/s
  and fp8 ≈ 740K tok/s per 524,288-token step, and the record's ≈ 705 ms): predicted from the H200
  points only (no H100 measurement in the calibration), fp8 through the published fp8 factor.
Prints a markdown table and the geometric-mean error (exp of the mean |ln(predicted/measured)|,
minus 1). Pure arithmetic: runs anywhere, in a second.
"""

from __future__ import annotations

import math

from benchctl.predict.calibration import Calibration, ComputePoint, default_points
from benchctl.predict.model import predict
from benchctl.predict.workload import nanochat

H200_EXTRA = ComputePoint("H200", "bf16", nanochat("nanochat-d26", 1, 8 * 2048, attention="sdpa"), 318.6, 226.0,
                          85.65, "published", "measured: docs/measurements/2026-11-25-gpu-h200.md (batch 8 x 1)")
PUBLISHED_H100 = (  # (label, precision, measured ms, source)
    ("8×H100 SXM d26 bf16", "bf16", 524_288 / 630_000 * 1000, "upstream dev/LOG.md: ≈ 630K tok/s (REFERENCE.md)"),
    ("8×H100 SXM d26 fp8", "fp8", 524_288 / 740_000 * 1000, "upstream dev/LOG.md: ≈ 740K tok/s (REFERENCE.md)"),
    ("8×H100 SXM d26 fp8 record", "fp8", 705.0, "the d26 record at a67eba3, ≈ 705 ms (REFERENCE.md)"),
)


def rows() -> list[dict[str, object]]:
    h200 = [*default_points(), H200_EXTRA]
    out = []
    for held in h200:
        calibration = [p for p in h200 if p.workload.name != held.workload.name]
        cal = Calibration(calibration)
        work = held.workload
        pred = predict(work, cal.inputs("H200", 1, 1, "bf16", None, work))
        out.append(_row(f"1×H200 {work.name.removeprefix('nanochat-')} {work.tokens_per_step // 2048}×2048 tok",
                        pred, held.step_ms, "docs/measurements/2026-11-25-gpu-h200.md",
                        ", ".join(sorted({p.workload.name[len("nanochat-"):] for p in calibration})) + " (H200)"))
    cal = Calibration(default_points())
    for label, precision, measured, source in PUBLISHED_H100:
        work = nanochat("nanochat-d26", 8, 524_288)
        pred = predict(work, cal.inputs("H100_SXM", 8, 1, precision, None, work))
        out.append(_row(label, pred, measured, source, "d12, d20, d26 (H200, world size 1)"))
    return out


def _row(label: str, pred: object, measured: float, source: str, calibrated_on: str) -> dict[str, object]:
    d = pred.as_dict()  # type: ignore[attr-defined]
    error = d["step_time_ms"] / measured - 1
    return {"cell": label, "measured_ms": measured, "predicted_ms": d["step_time_ms"],
            "range_ms": f"{d['step_time_ms_low']:.0f}–{d['step_time_ms_high']:.0f}", "error": error,
            "in_range": d["step_time_ms_low"] <= measured <= d["step_time_ms_high"],
            "calibrated_on": calibrated_on, "measured_by": source}


def main() -> None:
    table = rows()
    print("| held-out cell | measured ms | predicted ms | range ms | error | in range | calibrated on | measured by |")
    print("|---|---|---|---|---|---|---|---|")
    for r in table:
        print(f"| {r['cell']} | {r['measured_ms']:.1f} | {r['predicted_ms']:.1f} | {r['range_ms']} | "
              f"{r['error']:+.1%} | {'yes' if r['in_range'] else 'no'} | {r['calibrated_on']} | {r['measured_by']} |")
    logs = [abs(math.log(1 + float(r["error"]))) for r in table]  # type: ignore[arg-type]
    geomean = math.exp(sum(logs) / len(logs)) - 1
    print(f"\ngeomean error over {len(logs)} held-out cells: {geomean:.1%} (exp of the mean |ln(predicted / "
          f"measured)|, minus 1; the largest {math.exp(max(logs)) - 1:.1%})")


if __name__ == "__main__":
    main()
