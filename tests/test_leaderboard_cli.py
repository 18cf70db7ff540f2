"""`benchctl leaderboard` as a reader meets it (issue 18, items 2 and 7): ranked within each model
and target, a narrow default table that fits 80 and 100 columns on a terminal, `--wide`,
`--columns`, `--top`, a valid Markdown table, filters that ignore case and say when they match
nothing."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from benchctl.results.leaderboard import NARROW_COLUMNS, TABLE_COLUMNS
from tests import terminal
from tests.conftest import cli_here

D26 = "{model: nanochat-d26, target_param_data_ratio: 8.5, total_batch_size: 524288}"
D2 = "{model: nanochat-d2, target_param_data_ratio: 8.5, total_batch_size: 4096}"
D2_LONGER = "{model: nanochat-d2, target_param_data_ratio: 17, total_batch_size: 4096}"
RECORDS = f"""\
- {{provider: lambda, gpu: H100_SXM, count: 8, market: on-demand, hourly_usd: 23.92, step_time_ms: 702,
   interconnect: nvswitch_mesh NV18, vcpus: 208, numa: "2 nodes, GPUs on 0+1", target: {D26}}}
- {{provider: runpod, gpu: H100_SXM, count: 8, market: spot, hourly_usd: 14.0, step_time_ms: 1295,
   flags: [numa_split, bad_nodes×2, preempted×1], target: {D26}}}
- {{provider: runpod, gpu: H100_NVL, count: 8, market: on-demand, hourly_usd: 19.12, step_time_ms: 980,
   target: {D26}}}
- {{provider: local, gpu: cpu, count: 1, market: on-demand, hourly_usd: 0.5, step_time_ms: 100,
   env: {{OMP_NUM_THREADS: "4"}}, target: {D2}}}
- {{provider: local, gpu: cpu, count: 2, market: on-demand, hourly_usd: 1.0, step_time_ms: 80, target: {D2}}}
"""


@pytest.fixture
def store(home: Path, tmp_path: Path) -> Path:
    """Two models in one campaign: a CPU nanochat-d2 (cents) and three 8×H100 nanochat-d26 cells."""
    records = tmp_path / "rows.yaml"
    records.write_text(RECORDS)
    result = cli_here("import", str(records), "--campaign", "Pub", home=home)
    assert result.returncode == 0, result.stderr
    return home


def board(home: Path, *args: str) -> list[dict]:
    result = cli_here("leaderboard", "--format", "json", *args, home=home)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def header(table: str) -> list[str]:
    """The column headers of a plain (piped) table: its second line (the first is the title)."""
    return re.split(r"\s{2,}", table.splitlines()[1].strip())


def test_a_ranking_compares_one_model_over_one_target(store: Path, tmp_path: Path) -> None:
    rows = board(store)
    assert [(r["model"], r["rank"]) for r in rows] == [
        ("nanochat-d2", 1), ("nanochat-d2", 2), ("nanochat-d26", 1), ("nanochat-d26", 2), ("nanochat-d26", 3)]
    d26 = [r for r in rows if r["model"] == "nanochat-d26"]
    assert [r["cost_to_train_usd"] for r in d26] == sorted(r["cost_to_train_usd"] for r in d26)
    table = cli_here("leaderboard", home=store).stdout
    assert header(table)[:2] == ["rank", "model"]
    assert table.splitlines()[0] == "cost-to-train, ranked within each model, target and precision"
    assert "nanochat-d2 " in table and "nanochat-d26 " in table
    # the same model over a longer target is another ranking, and the table says which is which
    longer = tmp_path / "longer.yaml"
    longer.write_text(f"- {{provider: local, gpu: cpu, count: 4, market: on-demand, hourly_usd: 2.0, "
                      f"step_time_ms: 50, target: {D2_LONGER}}}\n")
    assert cli_here("import", str(longer), "--campaign", "longer", home=store).returncode == 0
    d2 = [(r["cell"], r["target_steps"], r["rank"]) for r in board(store, "--model", "nanochat-d2")]
    assert [rank for _, _, rank in d2] == [1, 2, 1] and d2[0][1] == d2[1][1] == d2[2][1] // 2
    table = cli_here("leaderboard", "--model", "nanochat-d2", home=store).stdout
    assert f"nanochat-d2 ({d2[0][1]:,} steps)" in table and f"nanochat-d2 ({d2[2][1]:,} steps)" in table
    one = cli_here("leaderboard", "--model", "nanochat-d26", home=store).stdout
    assert one.splitlines()[0] == "cost-to-train of nanochat-d26 over 14,889 target steps"


def test_fp8_and_bf16_steps_rank_apart_and_the_table_says_which(store: Path, tmp_path: Path) -> None:
    """An fp8 step (the record's) is not a bf16 one: same model and target, two rankings (issue 28 item 1)."""
    rows = tmp_path / "precisions.yaml"
    rows.write_text(f"""\
- {{provider: lambda, gpu: H100_SXM, count: 8, market: on-demand, hourly_usd: 23.92, step_time_ms: 705,
   precision: fp8, target: {D26}}}
- {{provider: runpod, gpu: H100_SXM, count: 8, market: on-demand, hourly_usd: 30.0, step_time_ms: 832,
   precision: bf16, target: {D26}}}
- {{provider: aws, gpu: H100_SXM, count: 8, market: on-demand, hourly_usd: 20.0, step_time_ms: 832,
   precision: bf16, target: {D26}}}
""")
    assert cli_here("import", str(rows), "--campaign", "Prec", home=store).returncode == 0
    ranked = [(r["precision"], r["provider"], r["rank"]) for r in board(store, "--campaign", "Prec")]
    assert ranked == [("bf16", "aws", 1), ("bf16", "runpod", 2), ("fp8", "lambda", 1)]
    table = cli_here("leaderboard", "--campaign", "Prec", home=store).stdout
    assert "nanochat-d26 (fp8)" in table and "nanochat-d26 (bf16)" in table
    top = board(store, "--campaign", "Prec", "--top", "1")  # the ranking read from a few columns agrees
    assert [(r["precision"], r["rank"]) for r in top] == [("bf16", 1), ("fp8", 1)]
    one = cli_here("leaderboard", "--campaign", "Prec", "--top", "1", "--format", "table", home=store).stdout
    assert one.splitlines()[0] == "cost-to-train, ranked within each model, target and precision"
    fp8 = cli_here("leaderboard", "--campaign", "Prec", "--provider", "lambda", home=store).stdout
    assert fp8.splitlines()[0] == "cost-to-train of nanochat-d26 over 14,889 target steps, fp8 matmuls"


def test_narrow_default_wide_columns_and_top(store: Path) -> None:
    table = cli_here("leaderboard", home=store).stdout
    assert header(table) == list(NARROW_COLUMNS)
    assert header(cli_here("leaderboard", "--wide", home=store).stdout) == list(TABLE_COLUMNS)
    chosen = cli_here("leaderboard", "--columns", "Cost, provider,$/hr", home=store).stdout
    assert header(chosen) == ["cost-to-train $", "provider", "$/hr"]
    for args, message in ((("--columns", "rank,bogus"), "unknown column 'bogus' in --columns; known: rank, model"),
                          (("--columns", "rank", "--wide"), "give --wide or --columns, not both"),
                          (("--format", "json", "--wide"), "json always carries every column")):
        refused = cli_here("leaderboard", *args, home=store)
        assert refused.returncode == 2 and message in refused.stderr, refused.stderr
        assert len(refused.stderr.splitlines()) == 1
    top = board(store, "--top", "1")
    assert [(r["model"], r["rank"], r["cell"]) for r in top] == [
        ("nanochat-d2", 1, "local:cpux1:on-demand:env=OMP_NUM_THREADS=4"),
        ("nanochat-d26", 1, "lambda:H100_SXMx8:on-demand")]
    assert len(cli_here("leaderboard", "--top", "2", home=store).stdout.splitlines()) == 2 + 4


def test_markdown_is_one_valid_table(store: Path) -> None:
    for args in ((), ("--wide",)):
        lines = cli_here("leaderboard", "--format", "md", *args, home=store).stdout.splitlines()
        columns = len(TABLE_COLUMNS if args else NARROW_COLUMNS)
        assert len(lines) == 2 + 5
        assert lines[1] == "|" + "|".join(["---"] * columns) + "|"
        for line in lines[:1] + lines[2:]:
            assert line.startswith("| ") and line.endswith(" |")
            assert len(re.findall(r"(?<!\\)\|", line)) == columns + 1, line


def test_filters_ignore_case_and_say_when_they_match_nothing(store: Path) -> None:
    assert {r["provider"] for r in board(store, "--provider", "RUNPOD")} == {"runpod"}
    assert len(board(store, "--model", "NanoChat-D26", "--market", "SPOT")) == 1
    assert len(board(store, "--campaign", "pub")) == 5
    format_upper = cli_here("leaderboard", "--format", "JSON", home=store)
    assert format_upper.returncode == 0 and len(json.loads(format_upper.stdout)) == 5
    for args, message in ((("--provider", "vast"), "no results match --provider vast; known: lambda, local, runpod"),
                          (("--model", "gpt-2"), "no results match --model gpt-2; known: nanochat-d2, nanochat-d26"),
                          (("--campaign", "nope"), "no results match --campaign nope; known: Pub")):
        for fmt in ("table", "json"):
            result = cli_here("leaderboard", *args, "--format", fmt, home=store)
            assert result.returncode == 2 and result.stderr.strip() == f"error: {message}", result.stderr
    together = cli_here("leaderboard", "--provider", "local", "--market", "spot", home=store)
    assert together.returncode == 0 and together.stdout.strip() == "no results match --provider local --market spot"
    assert "no results yet" not in together.stdout
    assert board(store, "--provider", "local", "--market", "spot") == []


def in_terminal(home: Path, width: int, *args: str) -> str:
    """``benchctl leaderboard ARGS`` on a pseudo-terminal ``width`` columns wide, escape sequences removed."""
    text, code = terminal.on_terminal(home, width, "leaderboard", *args, stderr=True)
    assert code == 0, text
    return text


@pytest.mark.parametrize("width", [80, 100])
def test_the_terminal_table_fits_and_never_breaks_a_word(store: Path, width: int) -> None:
    text = in_terminal(store, width)
    lines = text.rstrip("\n").splitlines()
    assert max(map(len, lines)) <= width, text
    rule = next(i for i, line in enumerate(lines) if set(line.strip()) == {"─"})
    head_words = {w for line in lines[1:rule] for w in line.split()}
    pieces = [re.split(r"(?<=-)", word) for h in TABLE_COLUMNS for word in h.split()]
    allowed = {"".join(p[i:j]) for p in pieces for i in range(len(p)) for j in range(i + 1, len(p) + 1)}
    assert head_words <= allowed, f"a header broken inside a word: {head_words - allowed}\n{text}"
    body = "\n".join(lines[rule + 1:])
    assert rule <= 3, f"headers in two lines at most\n{text}"
    for whole in ("H100_SXM×8", "H100_NVL×8", "on-demand", "1,295.0", "74.98", "nanochat-d26", "lambda", "runpod",
                  *(("numa_split,", "preempted×1") if width == 100 else ())):
        assert re.search(rf"(^|\s){re.escape(whole)}(\s|$)", body, re.M), f"{whole} broken\n{text}"
    hidden = re.search(r"^\((\d+) more columns on a wider terminal; --format json has every one\)$", text, re.M)
    assert hidden is not None, text
    if width == 100:
        assert re.search(r"^1\s+nanochat-d26\s+lambda\s+H100_SXM×8\s+on-demand\s+702\.0\s+69\.45\s+-$",
                         body, re.M), text


def test_a_wide_terminal_shows_more_columns(store: Path) -> None:
    """The default on a terminal uses its width: more of the columns --wide has at 200 than at 80."""
    def headers(width: int) -> int:
        lines = in_terminal(store, width).splitlines()
        rule = next(i for i, line in enumerate(lines) if set(line.strip()) == {"─"})
        return sum(len(re.split(r"\s{2,}", line.strip())) for line in lines[rule - 1:rule])

    narrow, wide = headers(80), headers(200)
    assert narrow >= 6 and wide >= narrow + 6, (narrow, wide)
