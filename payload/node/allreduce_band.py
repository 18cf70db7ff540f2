"""One rule for a node's own all_reduce busbw (pure): the single-node ``nccl_allreduce`` check and
the cross-node ``intra_node_busbw`` check judge the same figure the same way.

``Band.of(model, count, fraction)`` takes the healthy figure of the configuration
(``thresholds.EXPECTED_ALLREDUCE_BUSBW``: what a healthy node shows with ring all_reduce, without
NVLink SHARP) and the campaign's ``allreduce_min_fraction``:

- pass: busbw ≥ the healthy ring figure (≈ 480 on 8× H100 SXM with NVLS, ≈ 370 without);
- warn: below it but at or above ``fraction`` × it, a floor a healthy ring-only node never falls
  under; the node runs on, flagged;
- fail: below the floor (a disabled transport, lanes down, a broken node): the node is replaced.

A node without NVLS (``NCCL_NVLS_ENABLE=0``, set by some images and by aws-ofi-nccl for
NCCL < 2.18.5, or an NCCL without it) is not a bad node: the hint says so whenever a figure sits
nearer the ring figure than the NVLS one.
"""

from __future__ import annotations

from dataclasses import dataclass

from .thresholds import EXPECTED_ALLREDUCE_BUSBW, NVLS_ALLREDUCE_BUSBW


@dataclass(frozen=True)
class Band:
    expected: float
    """The healthy figure: pass at or above it."""
    floor: float
    """Fail below it; warn between it and ``expected``."""
    nvls: float | None = None
    """What the configuration reaches with NVLink SHARP, where it has it."""

    @classmethod
    def of(cls, model: str, count: int, fraction: float) -> Band | None:
        """The band of ``count`` × ``model``; None without a published figure."""
        expected = EXPECTED_ALLREDUCE_BUSBW.get((model, count))
        if expected is None:
            return None
        return cls(expected, round(expected * fraction, 1), NVLS_ALLREDUCE_BUSBW.get((model, count)))

    def status(self, busbw: float) -> str:
        return "pass" if busbw >= self.expected else "warn" if busbw >= self.floor else "fail"

    def expected_text(self) -> str:
        if self.floor >= self.expected:
            return f">= {self.expected:.0f} GB/s"
        return f">= {self.expected:.0f} GB/s (warn below, fail below {self.floor:.0f})"

    def nvls_note(self, busbw: float) -> str:
        """Why a figure nearer the ring figure than the NVLS one is healthy ("" elsewhere)."""
        if self.nvls is None or busbw >= (self.expected + self.nvls) / 2:
            return ""
        return (f"ring figure: NVLink SHARP (NVLS) not in use (NCCL_NVLS_ENABLE=0, set by some images and by "
                f"aws-ofi-nccl for NCCL < 2.18.5, or an NCCL without it) reaches ≈{self.nvls:.0f} GB/s with it; "
                "not a bad node")

    def hint(self, busbw: float, causes: str) -> str:
        """What the status of ``busbw`` means; ``causes`` lists what to check when it fails."""
        status = self.status(busbw)
        if status == "pass":
            return self.nvls_note(busbw)
        if self.floor >= self.expected:  # a floor the campaign set: no healthy figure behind it
            return f"{busbw:.0f} GB/s is below the floor set, {self.floor:.0f} GB/s: {causes}"
        with_nvls = f"; ≈{self.nvls:.0f} with NVLink SHARP (NVLS)" if self.nvls else ""
        if status == "warn":
            return (f"{busbw:.0f} GB/s is below the healthy ring figure {self.expected:.0f}{with_nvls}, above the "
                    f"floor {self.floor:.0f} a healthy node never falls under: flagged, not replaced; {causes}")
        return (f"{busbw:.0f} GB/s is below {self.floor:.0f}, a floor a healthy node never falls under even "
                f"without NVLS (healthy ring figure {self.expected:.0f}{with_nvls}): {causes}")
