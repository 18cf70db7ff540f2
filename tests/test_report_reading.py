"""``benchctl report`` as a reader uses it: charts in rank order with "+x % vs best" labels, an axis
that shows differences of a few %, no empty box for a phase the campaign did not run, captions
that match the data, and, on the page of every campaign, a table of contents and a ranking across
campaigns (one table per model). Built from imported records (``benchctl import``), whose order
in the file differs from their rank order."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from benchctl.report.data import CampaignData, CellData
from benchctl.report.html import page
from benchctl.report.plots import figures
from benchctl.results.step_split import StepSplit
from tests.conftest import cli_here
from tests.test_report import parse

TARGET = {"model": "nanochat-d26", "target_param_data_ratio": 8.5, "total_batch_size": 524288}
# file order a, b, c; cost order b (20 × 720), c (25 × 705), a (30 × 700): within 3 % of each other in step time
RECORDS = [
    {"provider": "alpha", "gpu": "H100_SXM", "count": 8, "market": "on-demand", "hourly_usd": 30.0,
     "step_time_ms": 700.0, "target": TARGET, "optimizer_share": 0.28, "comm_share": 0.04},
    {"provider": "bravo", "gpu": "H100_SXM", "count": 8, "market": "on-demand", "hourly_usd": 20.0,
     "step_time_ms": 720.0, "target": TARGET},
    {"provider": "charlie", "gpu": "H100_SXM", "count": 8, "market": "spot", "hourly_usd": 25.0,
     "step_time_ms": 705.0, "target": TARGET},
]
OTHER_MODEL = [
    {"provider": "delta", "gpu": "A100", "count": 8, "market": "on-demand", "hourly_usd": 1.0,
     "step_time_ms": 100.0, "target": {**TARGET, "model": "nanochat-d12"}},
]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A BENCHCTL_HOME with campaign ``h100s`` (RECORDS) and ``small`` (another model)."""
    root = tmp_path_factory.mktemp("reading")
    home = root / "home"
    for name, records in (("h100s", RECORDS), ("small", OTHER_MODEL)):
        path = root / f"{name}.json"
        path.write_text(json.dumps(records))
        made = cli_here("import", str(path), "--campaign", name, home=home)
        assert made.returncode == 0, made.stderr
    return home


def _report(home: Path, out: Path, *campaign: str) -> str:
    """``benchctl report`` in this process (it starts no node); the page's text."""
    made = cli_here("report", *campaign, "--out", str(out), home=home)
    assert made.returncode == 0, made.stderr
    return (out / "index.html").read_text()


@pytest.fixture(scope="module")
def one_page(store: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The page of campaign ``h100s`` alone, rendered once for the tests that read it."""
    return _report(store, tmp_path_factory.mktemp("one"), "h100s")


@pytest.fixture(scope="module")
def all_page(store: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The page of every campaign, rendered once for the tests that read it."""
    return _report(store, tmp_path_factory.mktemp("all"))


def _svg_texts(text: str, svg_id: str) -> list[str]:
    """The ``<text>`` strings of one inline SVG, in document order."""
    svg = re.search(rf'<svg[^>]*id="{svg_id}".*?</svg>', text, re.S)
    assert svg is not None, f"no svg {svg_id}"
    return [re.sub(r"<[^>]+>", "", t).strip() for t in re.findall(r"<text[^>]*>(.*?)</text>", svg.group(0), re.S)]


def _order(texts: list[str], words: list[str]) -> list[str]:
    return [w for t in texts for w in words if w in t]


def test_charts_are_in_rank_order_with_vs_best_labels_on_an_axis_that_shows_3_percent(one_page: str) -> None:
    text = one_page
    rank_order = ["bravo", "charlie", "alpha"]  # cheapest cost-to-train first, not the file's order
    for figure in ("c0-step_time", "c0-cost"):
        texts = _svg_texts(text, figure)
        assert _order([t for t in texts if t.startswith(("bravo", "charlie", "alpha"))],
                      rank_order) == rank_order, (figure, texts)
    step = " ".join(_svg_texts(text, "c0-step_time"))
    assert "700.0 ms, best" in step
    assert "705.0 ms, +0.7 % vs best" in step and "720.0 ms, +2.9 % vs best" in step
    # 700..720 ms would be indistinguishable bars from 0: the axis starts near 700 and says so
    assert "axis broken: starts at" in step and "not 0" in step
    ticks = [float(t.replace(",", "")) for t in _svg_texts(text, "c0-step_time") if re.fullmatch(r"[\d,.]+", t)]
    assert ticks and min(ticks) > 500, ticks
    cost = " ".join(_svg_texts(text, "c0-cost"))
    assert "cheapest" in cost and re.search(r"\+\d+\.\d % vs cheapest", cost)


def test_no_placeholder_box_for_a_phase_the_campaign_did_not_run(one_page: str) -> None:
    text = one_page
    svg_ids = {attrs["id"] for tag, attrs in parse(text).elements if tag == "svg"}
    # imported records: no collectives sweep, no preflight, no node launched; one record states its split
    assert svg_ids == {"c0-step_time", "c0-split", "c0-cost"}
    assert "no collectives measured" not in text and "c0-preflight" not in text
    assert "no node launched yet" not in text
    assert "no preflight checks recorded" not in text


def _cell(key: str, ranks: int, **kw: object) -> CellData:
    return CellData(key=key, provider="p", state="done", ranks=ranks, **kw)  # type: ignore[arg-type]


def _data(cells: list[CellData], phases: tuple[str, ...] | None) -> CampaignData:
    return CampaignData(name="c", budget_usd=10.0, spent_usd=0.0, model="nanochat-d2", tokens_per_step=512,
                        cells=cells, spend_curve=[], spend_by_provider={}, leaderboard=[], reference=None, now=0.0,
                        phases=phases)


def test_a_campaign_file_without_collectives_has_no_busbw_box() -> None:
    data = _data([_cell("p:cpux2:spot", 2, step_times_ms=[10.0, 11.0])], ("preflight", "profile"))
    text = page([(data, figures(data, "c0"))], generated_at=0.0)
    svg_ids = {attrs["id"] for tag, attrs in parse(text).elements if tag == "svg"}
    assert "c0-busbw" not in svg_ids and "c0-step_time" in svg_ids
    assert "bus bandwidth" not in text


def test_split_label_says_what_the_communication_share_is_of() -> None:
    split = StepSplit(step_s=1.0, fwd_bwd_s=0.72, optimizer_s=0.28, comm_s=0.04)
    data = _data([_cell("p:cpux2:spot", 2, step_times_ms=[1000.0], split=split)], ("profile",))
    texts = " ".join(_svg_texts(page([(data, figures(data, "c0"))], 0.0), "c0-split"))
    assert "of which" not in texts
    assert "optimizer 28% of the step, its communication 4% of the step" in texts


def test_busbw_caption_names_what_is_plotted_and_what_is_not() -> None:
    cells = [_cell("p:gpux8:a", 8, busbw={"all_reduce": [(1024, 1.0), (2048, 2.0)]}),
             _cell("p:gpux8:b", 8, busbw={"all_gather": [(1024, 3.0)]}, busbw_in_place={"all_gather"}),
             _cell("p:gpux1:c", 1, busbw={"all_reduce": [(1024, 0.0)]}),
             _cell("p:gpux8:d", 8)]
    data = _data(cells, ("collectives",))
    text = page([(data, figures(data, "c0"))], 0.0)
    note = re.search(r'id="c0-busbw-title".*?<p class="note">(.*?)</p>', text, re.S)
    assert note is not None
    caption = note.group(1)
    assert "Plotted: p:gpux8:a, p:gpux8:b." in caption
    assert "in-place for all_gather" in caption
    assert "one rank (no data moves between ranks): p:gpux1:c" in caption
    assert "no collectives measured: p:gpux8:d" in caption
    # the legend holds every plotted cell, also one only on the second panel
    legend = _svg_texts(text, "c0-busbw")
    assert "p:gpux8:b" in legend and "p:gpux1:c" not in legend


def test_the_page_of_every_campaign_has_contents_and_a_ranking_per_model(all_page: str, one_page: str) -> None:
    text = all_page
    parsed = parse(text)
    ids = {attrs["id"] for _, attrs in parsed.elements if attrs.get("id")}
    navs = [attrs for tag, attrs in parsed.elements if tag == "nav"]
    assert navs and navs[0].get("id") == "toc"
    links = [attrs["href"] for tag, attrs in parsed.elements if tag == "a" and attrs.get("href", "").startswith("#")]
    assert {"#ranking", "#c0", "#c1", "#c0-step_time-title", "#c1-cost-title"} <= set(links)
    assert all(link[1:] in ids for link in links), [link for link in links if link[1:] not in ids]
    ranking = re.search(r'<section id="ranking">(.*?)</section>', text, re.S)
    assert ranking is not None
    tables = re.findall(r'<h3 id="ranking-\d+-title">(.*?)</h3>.*?<tbody>(.*?)</tbody>', ranking.group(1), re.S)
    assert [model for model, _ in tables] == ["nanochat-d12", "nanochat-d26"]
    d26 = tables[1][1]
    positions = [d26.index(p) for p in ("bravo", "charlie", "alpha")]
    assert positions == sorted(positions)
    assert "cheapest" in d26 and "+22.4 %" in d26 and "+45.8 %" in d26
    assert "delta" in tables[0][1] and "delta" not in d26
    # a single campaign's page has neither
    one = one_page
    assert 'id="toc"' not in one and 'id="ranking"' not in one


def test_the_page_cites_no_file_the_reader_does_not_have(all_page: str) -> None:
    text = all_page
    visible = re.sub(r"<[^>]+>", " ", re.sub(r"<style>.*?</style>", "", text, flags=re.S))
    for cited in (r"REFERENCE\.md", r"\b\w+\.py\b", r"\bdocs/", r"\bpayload\.\w+", r"\bbenchctl\.\w+", "``"):
        assert not re.search(cited, visible), (cited, re.search(rf".{{60}}{cited}.{{60}}", visible, re.S))


def test_the_page_says_where_the_workload_differs_from_upstream_nanochat() -> None:
    data = _data([_cell("p:cpux2:spot", 2, step_times_ms=[10.0, 11.0])], ("profile",))
    text = page([(data, figures(data, "c0"))], 0.0)
    note = re.search(r'<p class="note" id="c0-workload">(.*?)</p>', text, re.S)
    assert note is not None and "Polar Express" in note.group(1) and "fp8" in note.group(1)
    assert text.index('id="c0-leaderboard"') < note.start()
    imported = replace(data, model="my-own-model")  # not a nanochat preset: nothing to compare with
    assert 'id="c0-workload"' not in page([(imported, figures(imported, "c0"))], 0.0)


def test_the_ranking_across_campaigns_keeps_fp8_and_bf16_steps_apart() -> None:
    """An fp8 step is not a bf16 one (issue 28 item 1): same model, two tables, each titled with its precision."""
    from types import SimpleNamespace

    from benchctl.report.html import ranking

    def row(provider: str, cost: float, precision: str) -> dict[str, object]:
        return {"model": "nanochat-d26", "precision": precision, "cost_to_train_usd": cost, "campaign": "c",
                "cell": provider, "gpu": "H100_SXM", "count": 8, "market": "on-demand", "hourly_usd": 1.0,
                "step_time_ms": 700.0}

    data = SimpleNamespace(model="nanochat-d26", leaderboard=[row("a", 100.0, "fp8"), row("b", 90.0, "bf16"),
                                                               row("c", 120.0, "bf16")])
    text = ranking([(data, {})])  # type: ignore[list-item]
    tables = re.findall(r'<h3 id="ranking-\d+-title">(.*?)</h3>.*?<tbody>(.*?)</tbody>', text, re.S)
    assert [title for title, _ in tables] == ["nanochat-d26, bf16", "nanochat-d26, fp8"]
    assert "cheapest" in tables[1][1] and ">a<" in tables[1][1] and ">b<" not in tables[1][1]
