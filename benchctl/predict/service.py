"""One prediction from names: the workload, the calibration (defaults, plus the store's points when
a store is given) and the model together; what ``predict`` and ``plan`` call."""

from __future__ import annotations

from typing import TYPE_CHECKING

from benchctl.errors import UsageError
from benchctl.payload.workloads.presets import UnknownPreset
from benchctl.predict.calibration import Calibration
from benchctl.predict.model import Prediction, predict
from benchctl.predict.workload import custom, nanochat

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine


def calibration(engine: Engine | None) -> Calibration:
    """The published defaults, refined by the store's results when ``engine`` is given."""
    base = Calibration()
    if engine is None:
        return base
    from benchctl.predict.stored import store_points

    return base.with_points(*store_points(engine))


def predict_for(engine: Engine | None, gpu: str, count: int, nodes: int, precision: str, *, model: str | None = None,
                params: int | None = None, flops_per_token: float | None = None, tokens_per_step: int = 524_288,
                sequence_len: int = 2048, attention: str = "fa3", interconnect: str | None = None,
                calibrated: Calibration | None = None) -> Prediction:
    world = count * nodes
    if model is not None:
        try:
            work = nanochat(model, world, tokens_per_step, sequence_len, attention)
        except UnknownPreset as exc:
            raise UsageError(f"{exc}; for another model give --params and --flops-per-token") from None
    else:
        assert params is not None and flops_per_token is not None
        work = custom(params, flops_per_token, world, tokens_per_step)
    cal = calibrated or calibration(engine)
    return predict(work, cal.inputs(gpu, count, nodes, precision, interconnect, work))
