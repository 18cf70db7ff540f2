"""What reading a records file costs per record (issue 31 item 13), without timing: a file of plain
ASCII JSON (an export) needs no storable check per value; in any other file a plain field (ASCII
text, an integer within 64 bits, a float, an empty list or map) is checked without
``value_problem``'s walk, and what needs the walk still gets it; the fast JSON path refuses what
``load_yaml`` refuses (nesting, value counts) at the same limits. An export is parsed once, its
scalars checked as they are parsed (no walk over every value), and gives what the general way
gives: the same cells and JSON, or the same error."""

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


# --- an export read once (issue 31 item 13, fourth round) ------------------------------------------

FULL = {**RECORD, "cell": "lambda:H100_SXMx8:on-demand", "campaign": "bench", "nodes": 1, "vcpus": 192,
        "numa": "1 node", "env": {"RUN": "7"}, "model": "nanochat-d26", "precision": "bf16", "compiled": True,
        "attention": "flash_attn3", "host_data": "synthetic", "step_time_p10_ms": 690.0, "step_time_p90_ms": 720,
        "drift": None, "settle_steps": 3, "settle_s": 1.5, "optimizer_ms": 120.5, "optimizer_share": 0.2,
        "comm_share": 0.08, "busbw_gbps": 470.0, "busbw_bytes": 1 << 30, "train_hours": 2.5,
        "cost_to_train_usd": 20.4, "spot_usd_per_hour": None, "status": "done", "no_result": None,
        "flags": ["numa_split", "drift +3.0%"]}
SKIPPED = {"cell": "lambda:A100x8:spot", "status": "failed", "step_time_ms": None, "env": {}, "flags": ["x"]}


def test_an_export_is_parsed_once_without_the_value_walk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A leaderboard export is parsed once by the json module (scalars checked as they are parsed):
    no walk over every value (``_plain_json``) and no YAML (``load_yaml``); before, every file paid
    for the walk."""
    calls: list[str] = []
    for name in ("_plain_json", "load_yaml"):
        real = getattr(records, name)
        monkeypatch.setattr(records, name, lambda *a, _n=name, _r=real, **k: calls.append(_n) or _r(*a, **k))
    rows = [{**FULL, "cell": f"c{i}"} for i in range(300)] + [SKIPPED]
    found, skipped = records.read_records(_write(tmp_path, rows))
    assert (len(found), skipped, calls) == (300, 1, [])


def _both_ways(path: Path, monkeypatch: pytest.MonkeyPatch, **options: Any) -> tuple[Any, Any]:
    """``read_records`` as it reads the file, and as the general way alone reads it: the results
    (cells and their JSON) or the error each gives."""
    def outcome() -> Any:
        try:
            found, skipped = records.read_records(path, **options)
        except SpecError as exc:
            return str(exc)
        return skipped, [(r.campaign, r.key, r.config_json, json.dumps(r.result)) for r in found]

    quick = outcome()
    with monkeypatch.context() as general:
        general.setattr(records, "_export", lambda text: records._NOT_PLAIN)
        return quick, outcome()


def _deep(depth: int) -> Any:
    value: Any = "x"
    for _ in range(depth):
        value = {"a": value}
    return value


@pytest.mark.parametrize("rows", [
    [FULL, SKIPPED, {**FULL, "cell": "c2", "campaign": "other", "env": {}, "flags": []}],
    [{**FULL, "flags": []}, {**FULL, "campaign": "other"}],  # one cell, two campaigns
    [FULL, FULL],  # one cell twice
    [{**FULL, "count": 2**63}], [{**FULL, "rank": -(2**63) - 1}], [{**FULL, "rank": 2**63 - 1}],
    [{**FULL, "hourly_usd": 8}], [{**FULL, "count": 8.0}], [{**FULL, "compiled": 1}], [{**FULL, "vcpus": "192"}],
    [{**FULL, "step_time_ms": 1e-9}], [{**FULL, "drift": -1}], [{**FULL, "provider": "a b"}],
    [{**FULL, "provider": "runpod\n"}], [{**FULL, "campaign": "../x"}], [{**FULL, "market": "Spot"}],
    [{**FULL, "extra": 1}], [{**FULL, "env": {"A": 1}}], [{**FULL, "flags": "numa_split"}],
    [{**FULL, "target_steps": None}], [{**FULL, "target": {"model": "nanochat-d26", "target_param_data_ratio": 8.5,
                                                             "total_batch_size": 524288}, "target_steps": None}],
    [{**FULL, "env": {"NOTE": "café"}}], [{**FULL, "interconnect": "nv\ud800"}], [{**FULL, "numa": "a\u0000b"}],
    [{**SKIPPED, "env": _deep(3)}], [{**SKIPPED, "env": _deep(70)}], [{**FULL, "env": _deep(70)}],
    [FULL, 3], [FULL, _nested(70)], {**FULL}, [],
], ids=lambda rows: json.dumps(rows)[:60])
def test_an_export_read_once_gives_what_the_general_way_gives(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               rows: Any) -> None:
    path = _write(tmp_path, rows)
    for options in ({}, {"own_campaign": False}):
        quick, general = _both_ways(path, monkeypatch, **options)
        assert quick == general


@pytest.mark.parametrize("text", ["[NaN]", "[Infinity]", '[{"a": 1, "a": 2}]', f"[{2**63}]", f"[{-(2**63) - 1}]",
                                  "[{} {}]"])
def test_what_the_export_parse_refuses_goes_the_general_way(text: str) -> None:
    assert records._export(text) is records._NOT_PLAIN
    assert records._export(f"[{2**63 - 1}, {-(2**63)}, 1e308, 0.5]") == [2**63 - 1, -(2**63), 1e308, 0.5]


INFINITE = 12345.678
"""Written as ``1e999``, which the json module parses as inf: the export parse leaves floats to
``_records`` (``Record`` refuses inf in any field, ``_plain_row`` in a row it skips)."""


@pytest.mark.parametrize("rows", [
    [{**FULL, "step_time_ms": INFINITE}], [{**FULL, "rank": INFINITE}], [{**FULL, "train_hours": INFINITE}],
    [{**FULL, "compiled": INFINITE}], [{**FULL, "env": {"A": INFINITE}}], [{**FULL, "flags": [INFINITE]}],
    [FULL, {**SKIPPED, "rank": INFINITE}], [FULL, {**SKIPPED, "flags": [INFINITE]}],
    [FULL, {**SKIPPED, "env": {"A": -INFINITE}}],
], ids=["step_time_ms", "rank", "train_hours", "compiled", "env", "flags", "skipped-rank", "skipped-flags",
        "skipped-env"])
def test_an_infinite_float_in_an_export_goes_the_general_way(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             rows: Any) -> None:
    path = _write(tmp_path, rows)
    path.write_text(path.read_text().replace(str(INFINITE), "1e999"))
    quick, general = _both_ways(path, monkeypatch)
    assert quick == general  # load_yaml reads 1e999 as text: a float field refuses it, a text field takes it


def test_the_value_bound_sends_a_near_limit_file_the_general_way(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Each value follows a ``,`` ``:`` ``[`` or ``{`` (text holding them only counts more): a file
    the bound lets through is within ``max_values`` as ``_plain_json`` counts; one it stops is read
    the general way, as before (here: ``load_yaml``, whose count of the same file is lower)."""
    rows = [{**FULL, "cell": f"c{i}"} for i in range(20)]
    text = json.dumps(rows)
    values = 1 + sum(map(text.count, ",:[{"))
    monkeypatch.setattr(records, "LIMITS", records.Limits(max_bytes=records.LIMITS.max_bytes, max_values=values))
    assert records._export(text) == rows and records._plain_json(text) == rows
    monkeypatch.setattr(records, "LIMITS", records.Limits(max_bytes=records.LIMITS.max_bytes, max_values=values - 1))
    assert records._export(text) is records._NOT_PLAIN
    quick, general = _both_ways(_write(tmp_path, rows), monkeypatch)
    assert records._plain_json(text) is records._NOT_PLAIN
    assert quick == general


def test_the_stored_config_is_what_the_record_model_dumps(tmp_path: Path) -> None:
    """``_priced`` writes a record's config with ``model_dump_json`` (pydantic's serializer, not
    ``json.dumps`` of ``model_dump``): the same keys in the same order, less the derived columns."""
    target = {"model": "nanochat-d26", "target_param_data_ratio": 8.5, "total_batch_size": 524288}
    for row in (FULL, {**FULL, "env": {}, "flags": [], "region": "US", "hourly_usd": 3},
                {**FULL, "target": target, "target_steps": None, "model": None}):
        record = records.Record.model_validate(row)
        dumped = record.model_dump(mode="json", exclude_none=True, exclude=set(records.DERIVED))
        config = records._priced(record).config_json
        assert json.loads(config) == dumped and list(json.loads(config)) == list(dumped)


def test_import_runs_without_the_cyclic_collector_and_gives_it_back(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The records an import builds hold no cycles, so ``benchctl import`` turns the cyclic collector
    off while it reads and writes (its passes over them found nothing and cost ~10 % of the CPU),
    and on again after, on success as on a refusal."""
    import gc

    from benchctl.results import importer
    from tests.conftest import cli_here

    real = importer.import_files
    seen: list[tuple[bool, int]] = []

    def watched(*args: Any) -> Any:
        before = sum(s["collections"] for s in gc.get_stats())
        try:
            return real(*args)
        finally:
            seen.append((gc.isenabled(), sum(s["collections"] for s in gc.get_stats()) - before))

    monkeypatch.setattr(importer, "import_files", watched)
    path = _write(tmp_path, [{**FULL, "cell": f"c{i}", "env": {"RUN": str(i)}} for i in range(2_000)])
    assert cli_here("import", str(path), "--campaign", "first", home=tmp_path / "home").returncode == 0
    assert seen == [(False, 0)] and gc.isenabled()
    path.write_text(json.dumps([{**FULL, "count": 0}]))
    assert cli_here("import", str(path), "--campaign", "second", home=tmp_path / "home").returncode == 2
    assert seen[1] == (False, 0) and gc.isenabled()
