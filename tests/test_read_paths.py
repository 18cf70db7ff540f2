"""Read paths scale with what they show, not with what is stored (issue 31 item 13).

Structure, not time (the times are in docs/measurements/2026-11-26-read-paths.md, from
scripts/bench_read_paths.py): the statements ``status``, ``leaderboard`` and ``report`` send do not
grow with a campaign's cells (counted by an SQLAlchemy ``before_cursor_execute`` listener on every
engine); ``status`` of a large campaign is a summary per state plus a bounded list; the report's
figures and tables hold a bounded number of cells; ``import`` builds no ORM object per record.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from tests.conftest import cli_here
from tests.synthetic_campaign import fill

PATTERN = ("done", "failed", "done", "bad_node", "running", "done", "pending", "preempted", "done", "done")
"""Every state a read path treats apart, in every slice of 10 cells."""


def _home(tmp_path: Path, cells: int) -> Path:
    home = tmp_path / f"home-{cells}"
    home.mkdir(mode=0o700)
    fill(f"sqlite:///{home / 'benchctl.db'}", cells, samples=4, pattern=PATTERN)
    return home


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _home(tmp_path_factory.mktemp("small"), 20)


@pytest.fixture(scope="module")
def large(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _home(tmp_path_factory.mktemp("large"), 400)


@contextmanager
def statements() -> Iterator[list[str]]:
    """Every statement any engine sends while the block runs (executemany counts once)."""
    sent: list[str] = []

    def count(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        sent.append(statement)

    sa.event.listen(Engine, "before_cursor_execute", count)
    try:
        yield sent
    finally:
        sa.event.remove(Engine, "before_cursor_execute", count)


def _count(home: Path, *args: str) -> tuple[int, str]:
    with statements() as sent:
        done = cli_here(*args, home=home)
    assert done.returncode == 0, done.stderr
    return len(sent), done.stdout


@pytest.mark.parametrize("args", [("status", "bench"), ("status", "bench", "--format", "json"),
                                  ("status", "bench", "--all"), ("leaderboard",), ("leaderboard", "--format", "json"),
                                  ("leaderboard", "--campaign", "bench", "--top", "3")])
def test_statements_do_not_grow_with_the_cells(small: Path, large: Path, args: tuple[str, ...]) -> None:
    few, _ = _count(small, *args)
    many, _ = _count(large, *args)
    assert many == few, f"{' '.join(args)}: {few} statements at 20 cells, {many} at 400"


def test_report_statements_do_not_grow_with_the_cells(small: Path, large: Path, tmp_path: Path) -> None:
    few, _ = _count(small, "report", "bench", "--out", str(tmp_path / "few"))
    many, _ = _count(large, "report", "bench", "--out", str(tmp_path / "many"))
    assert many == few, f"report: {few} statements at 20 cells, {many} at 400"


def test_status_of_a_large_campaign_is_a_summary_and_a_bounded_list(large: Path) -> None:
    from benchctl.cli.status import LISTED

    _, text = _count(large, "status", "bench")
    lines = text.splitlines()
    assert lines[1] == ("cells: 400 (200 done, 40 failed, 40 bad_node, 40 preempted, 40 running, 40 pending)"), lines[1]
    listed = [line for line in lines if line.startswith(("runpod:", "vastai:", "aws:", "lambda:", "local:"))]
    assert len(listed) == LISTED
    assert {line.split()[1] for line in listed} <= {"failed", "bad_node"}, "most urgent first"
    assert lines[-1] == ("not listed: 120 more that need attention and 240 done or pending; "
                         "`benchctl status bench --all` lists every cell")
    payload = json.loads(_count(large, "status", "bench", "--format", "json")[1])["campaigns"][0]
    assert len(payload["cells"]) == LISTED and payload["cells_total"] == 400
    assert payload["cells_not_listed"] == 400 - LISTED and payload["cells_by_state"]["done"] == 200
    every = json.loads(_count(large, "status", "bench", "--all", "--format", "json")[1])["campaigns"][0]
    assert len(every["cells"]) == 400 and every["cells_not_listed"] == 0
    failed = next(c for c in every["cells"] if c["state"] == "failed")
    assert failed["attempts"] == 2 and failed["reason"] == "retries exhausted"
    bad = next(c for c in every["cells"] if c["state"] == "bad_node")
    assert bad["reason"] == "attempt 1 bad_node"


def test_status_of_a_small_campaign_lists_every_cell(small: Path) -> None:
    payload = json.loads(_count(small, "status", "bench", "--format", "json")[1])["campaigns"][0]
    assert len(payload["cells"]) == 20 and payload["cells_not_listed"] == 0


def test_a_terminal_leaderboard_shows_a_bounded_table(large: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    from benchctl.cli.leaderboard import TERMINAL_ROWS, print_leaderboard
    from benchctl.store.database import open_store

    engine = open_store(f"sqlite:///{large / 'benchctl.db'}")
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    print_leaderboard(engine, None, "table")
    text = capsys.readouterr().out
    assert f"… {400 - TERMINAL_ROWS:,} more rows: --all shows every one" in text
    assert sum(" runpod " in line or " vastai " in line or " aws " in line or " lambda " in line
               or " local " in line for line in text.splitlines()) <= TERMINAL_ROWS
    print_leaderboard(engine, None, "table", every=True)
    assert "more rows" not in capsys.readouterr().out


@pytest.mark.parametrize("by_id", [5_000, 2])
def test_a_part_of_the_leaderboard_is_the_same_rows_as_the_whole(large: Path, by_id: int,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """``--top`` (and a terminal's first rows) rank every row from a few columns and read only the rows
    shown (by id, or every row when they are more than ``BY_ID``): the same rows, ranks and order as the
    whole leaderboard cut afterwards."""
    from benchctl.results import leaderboard

    monkeypatch.setattr(leaderboard, "BY_ID", by_id)
    whole = json.loads(cli_here("leaderboard", "--format", "json", home=large).stdout)
    part = json.loads(cli_here("leaderboard", "--top", "3", "--format", "json", home=large).stdout)
    assert part == [r for r in whole if r["rank"] is not None and r["rank"] <= 3]
    assert len(part) == 3


def test_result_less_cells_keep_their_flags(large: Path) -> None:
    """Flags of cells without a result come from their evidence, read for all of them at once."""
    rows = json.loads(cli_here("leaderboard", "--format", "json", home=large).stdout)
    bad = next(r for r in rows if r["status"] == "bad_node")
    assert bad["flags"] == ["bad_nodes×1"]
    preempted = next(r for r in rows if r["status"] == "preempted")
    assert preempted["flags"] == ["preempted×1"]


def test_the_report_of_a_large_campaign_draws_bounded_figures_and_tables(large: Path) -> None:
    from benchctl.report import data as report_data
    from benchctl.report.plots import busbw, cost, split, step_time
    from benchctl.store.database import open_store

    engine = open_store(f"sqlite:///{large / 'benchctl.db'}")
    data = report_data.campaign_data(engine, "bench")
    assert len(data.cells) == report_data.PLOTTED_CELLS and data.cells_total == 400
    assert [c.cost_usd for c in data.cells] == sorted(c.cost_usd for c in data.cells if c.cost_usd is not None)
    for figure in (step_time(data), split(data), cost(data)):
        (ax,) = figure.axes
        assert len(ax.get_yticklabels()) == report_data.PLOTTED_CELLS
    for ax in busbw(data).axes:
        assert len(ax.get_lines()) <= report_data.BUSBW_CELLS
    assert len(data.spend_curve) <= report_data.SPEND_POINTS
    assert len(data.leaderboard) + data.leaderboard_omitted == 400
    assert len({c.key for c in data.preflight_only}) <= report_data.PREFLIGHT_CELLS
    assert all(run.outcome == "bad_node" for c in data.preflight_only for run in c.preflight)


def test_the_page_says_what_it_left_out(large: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from benchctl.report import data as report_data
    from benchctl.report import html

    monkeypatch.setattr(report_data, "TABLE_ROWS", 25)
    monkeypatch.setattr(html, "TABLE_ROWS", 25)
    _, _ = _count(large, "report", "bench", "--out", str(tmp_path / "page"))
    text = (tmp_path / "page" / "index.html").read_text()
    assert text.count("<tr>") < 25 * 2 + 200, "leaderboard and preflight tables bounded"
    assert "more cells are not listed" in text and "--format csv` lists every one" in text
    assert "The figure shows the best 30 of the campaign&#x27;s 400 cells in rank order" in text


def test_spend_curve_of_many_attempts_is_one_sweep() -> None:
    """The sweep gives what summing every attempt at every point gave, on a mix of closed, open,
    unpriced and never-launched attempts."""
    from benchctl.report.data import _accrued, spend_curve
    from benchctl.store.aggregates import AttemptSpend

    attempts = [AttemptSpend("p", False, "done", 0.0, 100.0, 3.6, 0.12),
                AttemptSpend("p", True, None, 50.0, None, 36.0, None),
                AttemptSpend("q", False, "bad_node", 20.0, 60.0, None, 0.0),
                AttemptSpend("q", False, "error", None, 70.0, 7.2, 0.3),
                AttemptSpend("q", False, "preempted", 30.0, 30.0, 7.2, 0.0)]
    now = 150.0
    curve = spend_curve(attempts, now)

    def by_hand(t: float) -> float:
        return sum((a.cost_usd or 0.0) if not a.open and a.terminated_at is not None and a.terminated_at <= t
                   else _accrued(a, t) for a in attempts)

    assert [t for t, _ in curve] == [0.0, 20.0, 30.0, 50.0, 60.0, 70.0, 100.0, 150.0]
    assert [usd for _, usd in curve] == pytest.approx([by_hand(t) for t, _ in curve])


def test_import_builds_no_orm_object_per_record(tmp_path: Path) -> None:
    """``save_import`` writes records with bulk statements: the ORM objects and statements it makes
    are as many for 300 records as for 3."""
    from benchctl.store import models
    from benchctl.store.database import open_store
    from benchctl.store.imports import CellResult, save_import

    def records(n: int, step_ms: float) -> list[CellResult]:
        return [CellResult(key=f"p:H100x8:spot:env=RUN={i}", provider="p", gpu="H100", count=8, market="spot",
                           config_json='{"env": {}}', result={"step_time_ms": step_ms, "step_time_p10_ms": step_ms,
                                                       "step_time_p90_ms": step_ms, "timed_steps": 1,
                                                       "hourly_usd": 2.0, "market": "spot", "target_steps": 10,
                                                       "train_hours": 1.0, "cost_to_train_usd": 2.0 + i})
                for i in range(n)]

    made: list[object] = []

    def built(target: object, *_: Any) -> None:
        made.append(target)

    counts = []
    for n in (3, 300):
        engine = open_store(f"sqlite:///{tmp_path / f'{n}.db'}")
        for model in (models.Campaign, models.Cell, models.Result, models.Attempt, models.Event):
            sa.event.listen(model, "init", built)
        try:
            with statements() as sent:
                save_import(engine, "imp", ["f.json"], records(n, 700.0), [])
                save_import(engine, "imp", ["f.json"], records(n, 650.0), [])  # again: every result replaced
        finally:
            for model in (models.Campaign, models.Cell, models.Result, models.Attempt, models.Event):
                sa.event.remove(model, "init", built)
        counts.append((len(made), len(sent)))
        made.clear()
        with engine.connect() as conn:
            stored = conn.execute(sa.text("select count(*), min(step_time_ms) from result")).one()
        assert tuple(stored) == (n, 650.0)
    assert counts[0] == counts[1], f"(ORM objects, statements) for 3 and 300 records: {counts}"


def _ranked_store(tmp_path: Path, models: tuple[str, ...]) -> Path:
    """The small synthetic campaign (rows without a result too) plus an imported one: several rank
    groups (``models`` × two targets), costs that tie, and spot/on-demand twins of one configuration."""
    home = _home(tmp_path, 20)
    records = [{"provider": "runpod", "gpu": "H100", "count": 8, "market": ("spot", "on-demand")[i % 2],
                "hourly_usd": 10.0 + i % 7, "step_time_ms": 100.0 + (i // 2) % 5,
                "target_steps": (1000, 2000)[i % 3 == 0],
                "model": models[i % len(models)], "cell": f"runpod:H100x8:{('spot', 'on-demand')[i % 2]}:n={i // 2}"}
               for i in range(90)]
    (tmp_path / "records.json").write_text(json.dumps(records))
    done = cli_here("import", str(tmp_path / "records.json"), "--campaign", "imp", home=home)
    assert done.returncode == 0, done.stderr
    return home


@pytest.mark.parametrize("one_by_one", [8, 0])
@pytest.mark.parametrize("models", [("nanochat-d2", "nanochat-d12", "nanochat-d4"), ("nanochat-d2", "Nanochat-D2")])
def test_a_part_ranked_in_sql_is_the_whole_leaderboard_cut(tmp_path: Path, models: tuple[str, ...], one_by_one: int,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """``ranked_part`` (what ``--top`` and a terminal's first rows show) gives the rows, ranks, order,
    count of rows left out and rank groups of the whole leaderboard cut afterwards, and the rows read
    by id carry both markets' costs as the whole does; models that differ only in case (rank groups
    that interleave) too; groups read one by one (a sort kept to N rows) or all at once (a window RANK)."""
    from benchctl.results import leaderboard
    from benchctl.results.leaderboard import Filters, leaderboard_rows, rank_group, ranked_part
    from benchctl.store.database import open_store

    monkeypatch.setattr(leaderboard, "GROUPS_ONE_BY_ONE", one_by_one)

    engine = open_store(f"sqlite:///{_ranked_store(tmp_path, models) / 'benchctl.db'}")
    whole = leaderboard_rows(engine)
    assert any(r["cost_spot_usd"] is not None for r in whole) and any(r["rank"] is None for r in whole)
    for top in (None, 1, 3, 40):
        for limit in (None, 1, 7, 50, 500):
            if top is None and limit is None:
                continue
            expected = [r for r in whole if top is None or (r["rank"] is not None and r["rank"] <= top)]
            part = ranked_part(engine, Filters(), top, limit)
            assert part.more == (max(0, len(expected) - limit) if limit is not None else 0), (top, limit)
            assert part.groups == {rank_group(r) for r in expected if r["rank"] is not None}, (top, limit)
            assert leaderboard_rows(engine, only=part.rows) == expected[:limit], (top, limit)


def test_top_is_ranked_in_sql_and_pairs_markets_for_the_rows_shown(large: Path, monkeypatch: pytest.MonkeyPatch,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """``leaderboard --top 3`` of 400 cells: the cheapest by ORDER BY … LIMIT in SQL, no ranking of every row in Python,
    and a configuration key parsed for the rows shown and their twins only, not for every row."""
    from benchctl.cli.leaderboard import print_leaderboard
    from benchctl.results import leaderboard
    from benchctl.store.database import open_store

    engine = open_store(f"sqlite:///{large / 'benchctl.db'}")
    parsed: list[str] = []
    real = leaderboard.configuration_key

    def counted(key: str) -> str:
        parsed.append(key)
        return real(key)

    monkeypatch.setattr(leaderboard, "configuration_key", counted)
    monkeypatch.setattr(leaderboard, "ranking", lambda *_: pytest.fail("every row ranked in Python"))
    with statements() as sent:
        print_leaderboard(engine, None, "json", top=3)
    assert len(json.loads(capsys.readouterr().out)) == 3
    assert any("ORDER BY result.cost_to_train_usd" in s and "LIMIT" in s for s in sent), sent
    assert len(parsed) <= 3 * 4, f"{len(parsed)} cell keys parsed for 3 rows shown"
