"""Order statistics shared by the payload's summaries and the controller's results (pure)."""

from __future__ import annotations

from collections.abc import Sequence


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile, q in [0, 100] (numpy's default method)."""
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def median(values: Sequence[float]) -> float:
    return percentile(values, 50.0)


def drift(values: Sequence[float]) -> dict[str, float] | None:
    """How a run's step times moved: the median of the first quarter of ``values`` (in the order they
    ran), of the last quarter, and ``drift`` = last ÷ first − 1 (+0.05: the last quarter 5 % slower);
    None with fewer than 4 values."""
    if len(values) < 4:
        return None
    quarter = len(values) // 4
    first, last = median(values[:quarter]), median(values[-quarter:])
    return {"first_quarter_median_s": first, "last_quarter_median_s": last,
            "drift": last / first - 1 if first > 0 else 0.0}


def settled(times: Sequence[float], min_s: float, max_s: float, window: int = 5, tolerance: float = 0.01) -> bool:
    """Whether a warm-up that ran steps of ``times`` seconds (in order, compilation excluded) may stop:
    after ``max_s`` seconds of them always; before ``min_s`` seconds never; in between once the median
    of the last ``window`` steps is within ``tolerance`` of the median of the ``window`` before (the
    clocks and power have settled: compiled steps drift up over their first seconds)."""
    spent = sum(times)
    if spent >= max_s:
        return True
    if spent < min_s or len(times) < 2 * window:
        return False
    before, last = median(times[-2 * window:-window]), median(times[-window:])
    return abs(last / before - 1) <= tolerance if before > 0 else True
