"""What reading a records file costs per record (issue 31 item 13), without timing: a file of plain
ASCII JSON (an export) needs no storable check per value; in any other file a plain field (ASCII
text, an integer within 64 bits, a float, an empty list or map) is checked without
``value_problem``'s walk, and what needs the walk still gets it; the fast JSON path refuses what
``load_yaml`` refuses (nesting, value counts) at the same limits."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchctl.errors import SpecError
from benchctl.results import records

RECORD = {"provider": "lambda", "gpu": "H100_SXM", "count": 8, "market": "on-demand", "hourly_usd": 23.92,
          "step_time_ms": 702.0, "target_steps": 14_889, "timed_steps": 8, "flags": [], "env": {},
          "interconnect": "nvlink", "rank": 3}


def _write(tmp_path: Path, rows: list[dict[str, Any]]) -> Path:
    path = tmp_path / "rows.json"
    path.write_text(json.dumps(rows))
    return path


def test_plain_fields_are_checked_without_the_value_walk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    walks: list[Any] = []
    real = records.value_problem
    def counted(value: Any) -> str | None:
        walks.append(value)
        return real(value)

    monkeypatch.setattr(records, "value_problem", counted)
    rows = [{**RECORD, "cell": f"c{i}"} for i in range(300)]
    found, skipped = records.read_records(_write(tmp_path, rows))
    assert (len(found), skipped) == (300, 0)
    assert walks == [], "no field of a plain ASCII export needs the walk"
    found, _ = records.read_records(_write(tmp_path, [{**RECORD, "env": {"NOTE": "café"}, "flags": ["numa_split"]}]))
    assert len(found) == 1 and len(walks) == 2, "a non-empty map and list are walked (and pass)"


@pytest.mark.parametrize(("field", "value", "says"), [
    ("env", {"NOTE": "\ud800"}, "not UTF-8"),
    ("interconnect", "nv\ud800link", "unicode string"),
    ("interconnect", "nv\0link", "NUL"),
    ("rank", 2**63, "out of range"),
], ids=["surrogate-in-env", "surrogate-text", "nul-text", "int-over-64-bits"])
def test_what_needs_the_walk_is_still_refused(tmp_path: Path, field: str, value: Any, says: str) -> None:
    with pytest.raises(SpecError) as refused:
        records.read_records(_write(tmp_path, [{**RECORD, field: value}]))
    assert says in str(refused.value) and field in str(refused.value)


def test_yaml_and_escaped_text_are_checked(tmp_path: Path) -> None:
    path = tmp_path / "rows.yaml"
    path.write_text('- {provider: lambda, gpu: H100_SXM, count: 8, market: on-demand, hourly_usd: 1.0,\n'
                    '   step_time_ms: 702.0, target_steps: 10, env: {NOTE: "a\\0b"}}\n')
    with pytest.raises(SpecError, match="NUL"):
        records.read_records(path)
    escaped = tmp_path / "escaped.json"
    escaped.write_text('[{"provider": "lambda", "gpu": "H100_SXM", "count": 8, "market": "on-demand", '
                       '"hourly_usd": 1.0, "step_time_ms": 702.0, "target_steps": 10, "env": {"NOTE": "a\\u0000b"}}]')
    with pytest.raises(SpecError, match="NUL"):
        records.read_records(escaped)


def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


def test_the_json_path_refuses_at_load_yamls_limits() -> None:
    deepest = records.LIMITS.max_depth
    assert records._plain_json(json.dumps(_nested(deepest))) == _nested(deepest)
    assert records._plain_json(json.dumps(_nested(deepest + 1))) is records._NOT_PLAIN
    assert records._plain_json(json.dumps({"a": _nested(deepest - 1)})) == {"a": _nested(deepest - 1)}
    assert records._plain_json(json.dumps({"a": _nested(deepest)})) is records._NOT_PLAIN
    most = records.LIMITS.max_values
    assert records._plain_json(json.dumps([0] * (most - 1))) == [0] * (most - 1)  # the list and its items
    assert records._plain_json(json.dumps([0] * most)) is records._NOT_PLAIN
    for bad in ("[1e999]", "[9223372036854775808]", '{"a": 1, "a": 2}', "[NaN]"):
        assert records._plain_json(bad) is records._NOT_PLAIN, bad
