"""Thousands of distinct collective names, from an nccl-tests log or a node's collectives samples
(issue 31, item 10): `import` stores nccl-tests' own collectives and at most ``MAX_OTHER_NAMES``
others and says in one line what it left out; the report's busbw figure has a bounded number of
panels and its note says what was not plotted. Structure only (names, rows, panels), never time.

The known names are nccl-tests' binaries (NVIDIA/nccl-tests ``src/Makefile``, ``BIN_FILES_LIST``);
a run's name comes from its ``# Collective test starting: <name>_perf`` line (``src/util.cu``)."""

from __future__ import annotations

import json
from pathlib import Path

from benchctl.report.data import CampaignData, CellData, busbw_series_of
from benchctl.report.html import busbw_note
from benchctl.report.plots import busbw
from benchctl.results.collective_names import KNOWN, MAX_OTHER_NAMES
from benchctl.results.nccl_log import RUNS_DESCRIBED, read_as, read_nccl_log
from benchctl.store.database import open_store
from tests.conftest import REPO, cli_here

NCCL_LOG = REPO / "tests" / "fixtures" / "all_reduce_perf_8xh100.log"
NAMES = 3000
RECORD = ("- {provider: lambda, gpu: H100_SXM, count: 8, market: on-demand, hourly_usd: 23.92, step_time_ms: 702, "
          "target_steps: 1000}\n")


def _many_names_log(tmp_path: Path) -> Path:
    """The fixture's all_reduce run, then ``NAMES`` one-size runs each naming its own collective."""
    lines = NCCL_LOG.read_text().splitlines()
    data = next(line for line in lines if line.strip().startswith("1048576"))
    runs = [f"# nThread 1 nGpus 1\n# Collective test starting: op{i}_perf\n{data}\n" for i in range(NAMES)]
    path = tmp_path / "sweep.log"
    path.write_text(NCCL_LOG.read_text() + "".join(runs))
    return path


def test_an_import_takes_the_known_collectives_and_a_few_others_and_says_what_it_left_out(
        home: Path, tmp_path: Path) -> None:
    records = tmp_path / "lambda.yaml"
    records.write_text(RECORD)
    out = cli_here("import", str(records), str(_many_names_log(tmp_path)), "--format", "json", home=home)
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    assert summary["collectives"] == 1
    assert summary["left_out"].startswith(f"left out {NAMES - MAX_OTHER_NAMES:,} other collective names "
                                          f"({2 * (NAMES - MAX_OTHER_NAMES):,} rows: 'op4', 'op5', 'op6', …)")
    (described,) = summary["logs_read_as"]
    assert described.count(" ranks, ") == RUNS_DESCRIBED
    assert f"and {NAMES + 1 - RUNS_DESCRIBED:,} more runs" in described
    engine = open_store(f"sqlite:///{home / 'benchctl.db'}")
    with engine.connect() as conn:
        stored = {json.loads(d)["op"] for (d,) in conn.exec_driver_sql(
            "SELECT data_json FROM event WHERE kind = 'sample' AND phase = 'collectives'")}
    assert stored == {"all_reduce", "op0", "op1", "op2", "op3"}
    table = cli_here("import", str(records), str(_many_names_log(tmp_path)), home=tmp_path / "table-home")
    assert table.returncode == 0 and table.stdout.count("left out") == 1, table.stdout
    assert len(table.stdout.splitlines()) == 3, "the summary, what the log was read as, what was left out"


def test_read_as_describes_a_bounded_number_of_runs(tmp_path: Path) -> None:
    text = _many_names_log(tmp_path).read_text()
    line = read_as(read_nccl_log(tmp_path / "sweep.log", text), text)
    assert len(line) < 2000 and line.count(";") == RUNS_DESCRIBED


def _campaign(cells: list[CellData]) -> CampaignData:
    return CampaignData(name="c", budget_usd=10.0, spent_usd=0.0, model="m", tokens_per_step=1, cells=cells,
                        spend_curve=[], spend_by_provider={}, leaderboard=[], reference=None, now=0.0,
                        phases=("collectives",))


def test_a_cell_whose_samples_name_thousands_of_collectives_plots_a_bounded_number_of_panels() -> None:
    samples = [{"op": name, "bytes": 1024, "busbw_gbps": 1.0} for name in KNOWN[:3]]
    samples += [{"op": f"op{i}", "bytes": 1024 * (1 + i % 4), "busbw_gbps": 2.0} for i in range(NAMES)]
    from benchctl.results.collective_names import Names

    names = Names()
    series, _ = busbw_series_of(samples, names)
    assert set(series) == {*KNOWN[:3], "op0", "op1", "op2", "op3"}
    cells = [CellData(key="p:gpux8:a", provider="p", state="done", ranks=8, busbw=series,
                      busbw_left_out=names.left_out.line()),
             CellData(key="p:gpux8:b", provider="p", state="done", ranks=8,
                      busbw={"x" * 500: [(1024, 1.0)], **{f"b{i}": [(1024, 1.0)] for i in range(10)}})]
    data = _campaign(cells)
    figure = busbw(data)
    titled = [ax.get_title() for ax in figure.axes if ax.get_title()]
    assert len(titled) == 3 + MAX_OTHER_NAMES, "nccl-tests' own collectives and a few others, across the cells"
    assert all(len(title) <= 40 for title in titled)
    note = busbw_note(data)
    assert f"p:gpux8:a: left out {NAMES - MAX_OTHER_NAMES:,} other collective names" in note
    assert "left out 11 other collective names" in note and len(note) < 2000
