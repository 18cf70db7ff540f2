"""``benchctl report``: the page of a real local campaign (preflight, collectives, profile, one cell
whose node fails preflight), parsed, and rendered in headless Chromium."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from html.parser import HTMLParser
from pathlib import Path

import pytest
from PIL import Image

from benchctl.report.data import CampaignData, CellData, Check, PreflightRun, campaign_data, spend_curve
from benchctl.report.html import PAGE_COLUMNS, page
from benchctl.report.plots import FIGURES, figures
from benchctl.results.leaderboard import COLUMNS, TABLE_COLUMNS
from benchctl.store import queries as q
from benchctl.store.database import open_store
from benchctl.store.models import Attempt
from tests.conftest import run_cli, run_once
from tests.local_campaign import REPORT_CAMPAIGN as CAMPAIGN
from tests.local_campaign import REPORT_FAILING_CELL as FAILING_CELL

pytestmark = pytest.mark.slow

CHROMIUM = Path("/usr/bin/chromium")


class Page(HTMLParser):
    """Every element's tag and attributes, the text inside each element id'd ``c0-…``, and style text."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.elements: list[tuple[str, dict[str, str]]] = []
        self.styles: list[str] = []
        self.text_by_id: dict[str, str] = {}
        self._open: list[str] = []
        self._in_style = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {k: v or "" for k, v in attrs}
        self.elements.append((tag, values))
        self._in_style = tag == "style"
        if values.get("id", "").startswith("c0-"):
            self._open.append(values["id"])
            self.text_by_id[values["id"]] = ""

    def handle_endtag(self, tag: str) -> None:
        self._in_style = False
        if tag in ("table", "svg", "p") and self._open:
            self._open.pop()

    def handle_data(self, data: str) -> None:
        if self._in_style:
            self.styles.append(data)
        for element_id in self._open:
            self.text_by_id[element_id] += data


def parse(text: str) -> Page:
    page = Page()
    page.feed(text)
    return page


@pytest.fixture(scope="session")
def reported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(BENCHCTL_HOME of a finished local campaign, the folder its report was written to); the
    campaign runs once per test run (``run_once``), each worker writes its own report."""
    home, _, ran = run_once(tmp_path_factory, "rep", CAMPAIGN)
    assert "local:cpux2:on-demand: done" in ran, ran
    out = tmp_path_factory.mktemp("report") / "out" / "nested"
    made = run_cli("report", "rep", "--out", str(out), home=home)
    assert made.returncode == 0, made.stderr
    assert made.stdout.strip() == str(out / "index.html")
    return home, out


def test_the_page_is_self_contained_with_every_figure_and_table(reported: tuple[Path, Path]) -> None:
    home, out = reported
    text = (out / "index.html").read_text()
    page = parse(text)
    assert [p.name for p in out.iterdir()] == ["index.html"]  # no temp file left behind
    for tag, attrs in page.elements:
        assert tag not in ("script", "link", "iframe", "object"), tag
        for name in ("src", "href", "xlink:href", "style"):
            value = attrs.get(name, "")
            assert not re.search(r"(https?:)?//", value), f"<{tag} {name}={value!r}> fetches something"
    assert not re.search(r"url\(\s*['\"]?(https?:)?//", " ".join(page.styles))
    svg_ids = [attrs.get("id") for tag, attrs in page.elements if tag == "svg"]
    assert sorted(svg_ids) == sorted(f"c0-{name}" for name in FIGURES)

    engine = open_store(f"sqlite:///{home / 'benchctl.db'}")
    (camp,) = q.campaigns(engine, "rep")
    keys = [c.key for c in q.cells(engine, camp.id or 0)]
    assert len(keys) == 3 and FAILING_CELL in keys
    board = page.text_by_id["c0-leaderboard"]
    for column in PAGE_COLUMNS:
        assert column in board
    every = page.text_by_id["c0-leaderboard-all"]  # the other columns: collapsed under it
    for column in TABLE_COLUMNS:
        assert column in every
    for key in keys:
        assert key in board
        assert key in page.text_by_id["c0-step_time"]
        assert key in page.text_by_id["c0-preflight"]
    assert "no result" in board and "no result (failed)" in page.text_by_id["c0-cost"]
    results = q.results(engine, camp.id)
    assert len(results) == 2
    for result, _, _ in results:
        assert f"${result.cost_to_train_usd:,.2f} at ${result.hourly_usd:,.2f}/h" in page.text_by_id["c0-cost"]
    # busbw: only the 2-rank cells that measured collectives, one panel per op
    busbw = page.text_by_id["c0-busbw"]
    assert "local:cpux2:on-demand" in busbw and "local:cpux1:on-demand" not in busbw
    for op in ("all_reduce", "all_gather", "reduce_scatter"):
        assert op in busbw
    # the bad node's shm check is a coloured fail, with its evidence listed
    fails = [attrs for tag, attrs in page.elements if tag == "td" and attrs.get("class") == "fail"]
    assert any("dev_shm_mb" in attrs.get("title", "") for attrs in fails)
    assert "shm</b> fail" in text


def _chromium(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM.exists(), "these tests need Debian's chromium: `apt-get install chromium` (scripts/test.sh does)"
    return subprocess.run([str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           f"--user-data-dir={cwd / 'chromium-profile'}", *args], capture_output=True, text=True,
                          timeout=180, cwd=cwd)


def test_chromium_renders_the_page_with_its_plots(reported: tuple[Path, Path], tmp_path: Path) -> None:
    _, out = reported
    url = (out / "index.html").as_uri()
    dom = _chromium("--dump-dom", url, cwd=tmp_path)
    assert dom.returncode == 0, dom.stderr[-2000:]
    rendered = parse(dom.stdout)
    drawn = {attrs["id"] for tag, attrs in rendered.elements if tag == "svg" and attrs.get("id")}
    assert drawn == {f"c0-{name}" for name in FIGURES}
    assert sum(tag == "path" for tag, _ in rendered.elements) > 50  # axes, bars and lines are paths

    shot = tmp_path / "report.png"
    made = _chromium(f"--screenshot={shot}", "--window-size=1400,5000", "--force-device-scale-factor=1", url,
                     cwd=tmp_path)
    assert made.returncode == 0 and shot.exists(), made.stderr[-2000:]
    image = Image.open(shot).convert("RGB")
    assert image.size == (1400, 5000)
    counts = image.getcolors(maxcolors=1 << 24)
    assert counts is not None
    total = image.width * image.height
    non_white = sum(n for n, rgb in counts if min(rgb) < 235) / total
    assert non_white > 0.03, f"only {non_white:.1%} of the screenshot is not white"
    assert len(counts) > 200, f"only {len(counts)} distinct colours"
    # the figures' own colours are on screen: the first cell's blue and the optimizer's orange bars
    for colour in ((0x00, 0x72, 0xB2), (0xE6, 0x9F, 0x00)):
        near = sum(n for n, rgb in counts if all(abs(a - b) <= 12 for a, b in zip(rgb, colour, strict=True)))
        assert near > 2000, f"colour {colour} covers only {near} pixels"


def test_report_data_spend_matches_the_store(reported: tuple[Path, Path]) -> None:
    home, _ = reported
    engine = open_store(f"sqlite:///{home / 'benchctl.db'}")
    (camp,) = q.campaigns(engine, "rep")
    now = time.time()
    data = campaign_data(engine, "rep", now)
    spent = q.spent_usd(engine, camp.id or 0, now)
    assert spent > 0
    assert data.spent_usd == pytest.approx(spent)
    assert sum(sum(per.values()) for per in data.spend_by_provider.values()) == pytest.approx(spent)
    assert [usd for _, usd in data.spend_curve] == sorted(usd for _, usd in data.spend_curve)
    failing = next(c for c in data.cells if c.key == FAILING_CELL)
    assert failing.cost_usd is None and failing.step_times_ms == []
    assert [run.outcome for run in failing.preflight] == ["bad_node"]
    assert failing.preflight[0].checks["shm"].status == "fail"
    done = next(c for c in data.cells if c.key == "local:cpux2:on-demand")
    assert len(done.step_times_ms) == 3 and done.split is not None
    assert {op: len(points) for op, points in done.busbw.items()} == {
        op: len({size for size, _ in points}) for op, points in done.busbw.items()}


def test_spend_curve_accrues_open_attempts_until_now() -> None:
    closed = Attempt(cell_id=1, number=1, token="a", provider="p", market="spot", remote_dir="d", hourly_usd=3.6,
                     open=False, launched_at=0.0, terminated_at=100.0, cost_usd=0.1)
    running = Attempt(cell_id=2, number=1, token="b", provider="p", market="spot", remote_dir="d", hourly_usd=36.0,
                      launched_at=50.0)
    curve = spend_curve([closed, running], now=150.0)
    assert [t for t, _ in curve] == [0.0, 50.0, 100.0, 150.0]
    # 3.6 $/h = 0.001 $/s; 36 $/h = 0.01 $/s
    assert [usd for _, usd in curve] == pytest.approx([0.0, 0.05, 0.1 + 0.5, 0.1 + 1.0])


def test_unknown_campaign_empty_store_and_a_file_as_out_are_usage_errors(
        reported: tuple[Path, Path], tmp_path: Path) -> None:
    home, _ = reported
    out = tmp_path / "out"
    unknown = run_cli("report", "nope", "--out", str(out), home=home)
    assert unknown.returncode == 2 and "no campaign named 'nope'" in unknown.stderr, unknown.stderr
    empty = run_cli("report", "--out", str(out), home=tmp_path / "empty-home")
    assert empty.returncode == 2 and "no campaigns in the store" in empty.stderr, empty.stderr
    a_file = tmp_path / "file"
    a_file.write_text("keep me")
    blocked = run_cli("report", "rep", "--out", str(a_file), home=home)
    assert blocked.returncode == 2 and "is a file" in blocked.stderr, blocked.stderr
    for result in (unknown, empty, blocked):
        assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not out.exists() and a_file.read_text() == "keep me"


def test_without_a_name_every_campaign_gets_a_section_even_one_with_nothing_run(
        reported: tuple[Path, Path], tmp_path: Path) -> None:
    home, _ = reported
    copy = tmp_path / "home"
    copy.mkdir()
    shutil.copy(home / "benchctl.db", copy / "benchctl.db")
    engine = open_store(f"sqlite:///{copy / 'benchctl.db'}")
    (rep,) = q.campaigns(engine, "rep")
    q.upsert_campaign(engine, "planned", rep.spec_json, "planned.yaml", 7.0,
                      [q.NewCell("local:cpux4:spot", "local", "cpu", 4, "spot", json.dumps({}))])
    made = run_cli("report", "--out", str(tmp_path / "all"), home=copy)
    assert made.returncode == 0, made.stderr
    parsed = parse((tmp_path / "all" / "index.html").read_text())
    sections = [attrs["id"] for tag, attrs in parsed.elements if tag == "section"]
    assert sections == ["ranking", "c0", "c1"]
    svg_ids = sorted(attrs["id"] for tag, attrs in parsed.elements if tag == "svg")
    assert svg_ids == sorted(f"c{i}-{name}" for i in (0, 1) for name in FIGURES)
    text = (tmp_path / "all" / "index.html").read_text()
    assert "campaign planned" in text and "$0.0000 of $7.00" in text
    assert "no timed profile steps yet" in text and "no node launched yet" in text


def test_store_strings_are_escaped() -> None:
    evil = '<script>alert("x")</script>'
    check = Check("nvlink", "fail", {"gpu0": evil}, "all links active", f"links {evil}")
    cell = CellData(key="local:cpux1:spot", provider="local", state="failed", ranks=1,
                    preflight=[PreflightRun(1, evil, "bad_node", {"nvlink": check})])
    data = CampaignData(name="c", budget_usd=1.0, spent_usd=0.0, model="nanochat-d1", tokens_per_step=128,
                        cells=[cell], spend_curve=[], spend_by_provider={}, now=0.0, reference=None,
                        phases=("preflight", "collectives", "profile"),
                        leaderboard=[{**dict.fromkeys(COLUMNS), "campaign": "c", "cell": cell.key, "gpu": "cpu",
                                      "count": 1, "status": evil, "flags": [evil], "env": {"NCCL_ALGO": evil}}])
    text = page([(data, figures(data, "c0"))], generated_at=0.0)
    assert "<script" not in text
    assert "&lt;script&gt;" in text
    assert sum(tag == "svg" for tag, _ in parse(text).elements) == len(FIGURES)
