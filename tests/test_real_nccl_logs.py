"""nccl-tests logs as published (tests/fixtures/nccl_logs/real, sources in its README) read right."""

from __future__ import annotations

from pathlib import Path

from benchctl.results.nccl_log import looks_like_nccl_log, read_nccl_log

REAL = Path(__file__).parent / "fixtures" / "nccl_logs" / "real"


def _largest(rows: list[dict]) -> dict:
    return max((row for row in rows if not row["in_place"]), key=lambda row: row["bytes"])


def test_collective_starting_line_names_the_collective_of_a_neutrally_named_log() -> None:
    # nccl-tests >= 2.16.7 prints "# Collective test starting" above "# nThread"; the old reader reset
    # the collective on "# nThread" and refused this file for lacking the line it has.
    rows = read_nccl_log(REAL / "dgx-spark-gb10-2ranks.log")
    assert {row["op"] for row in rows} == {"all_reduce"}
    assert {row["ranks"] for row in rows} == {2}
    assert [row["bytes"] for row in rows if not row["in_place"]] == [8192, 16384, 32768, 65536]
    assert _largest(rows)["busbw_gbps"] == 0.96
    assert rows[-1] == {"op": "all_reduce", "bytes": 65536, "count": 16384, "dtype": "float", "redop": "sum",
                        "in_place": True,
                        "time_us": 64.71, "algbw_gbps": 1.01, "busbw_gbps": 1.01, "wrong": 0, "ranks": 2}


def test_two_runs_each_with_a_starting_line_keep_their_own_collective(tmp_path: Path) -> None:
    text = (REAL / "dgx-spark-gb10-2ranks.log").read_text()
    second = text.replace("all_reduce_perf", "alltoall_perf")
    rows = read_nccl_log(tmp_path / "both.log", text + second)
    assert [row["op"] for row in rows[:8]] == ["all_reduce"] * 8
    assert [row["op"] for row in rows[8:]] == ["alltoall"] * 8


def _prefixed(prefix: str) -> str:
    return "".join(prefix + line for line in (REAL / "dgx-spark-gb10-2ranks.log").read_text().splitlines(True))


def test_slurm_srun_l_prefix_is_read(tmp_path: Path) -> None:
    text = _prefixed("0: ")
    assert looks_like_nccl_log(text)
    rows = read_nccl_log(tmp_path / "slurm-1234.out", text)
    assert (rows[0]["op"], rows[0]["ranks"], _largest(rows)["busbw_gbps"]) == ("all_reduce", 2, 0.96)


def test_open_mpi_tag_output_prefix_is_read(tmp_path: Path) -> None:
    text = _prefixed("[1,0]<stdout>:")
    assert looks_like_nccl_log(text)
    rows = read_nccl_log(tmp_path / "mpirun.out", text)
    assert (rows[0]["op"], rows[0]["ranks"], len(rows), _largest(rows)["bytes"]) == ("all_reduce", 2, 8, 65536)


def test_oldest_eleven_column_layout_is_read_from_the_right() -> None:
    # The pre-redop layout (size count type, then time algbw busbw error twice) was refused
    # ("expected 13 columns"). The collective comes from the name the user gives the file.
    path = REAL / "nccl-issue-340-11col.log"
    rows = read_nccl_log(Path("broadcast_perf.log"), path.read_text())
    assert len(rows) == 24
    largest = _largest(rows)
    assert (largest["bytes"], largest["count"], largest["dtype"]) == (134217728, 16777216, "float")
    # the "error" column of these versions is the largest deviation, not a count of wrong elements
    assert (largest["time_us"], largest["busbw_gbps"], largest["wrong"], largest["error"]) == (3298.6, 20.34, None, 0.0)
    assert rows[-1]["busbw_gbps"] == 21.86


def test_twelve_column_layout_with_error_and_na_is_read(tmp_path: Path) -> None:
    # Before nccl-tests 2.10 the rows had a redop but no root, and "N/A" where nothing was checked.
    # Built from the real 13-column rows by dropping the root column, as those versions printed them.
    lines = (REAL / "dgx-h100-wrong-values.log").read_text().splitlines()
    old = []
    for line in lines:
        fields = line.split()
        if fields[0] != "#":
            fields = fields[:4] + fields[5:12] + ["N/A"]
        old.append("  ".join(fields))
    rows = read_nccl_log(tmp_path / "all_reduce_perf.log", "\n".join(old))
    assert [row["wrong"] for row in rows] == [0, None, 0, None, 237858, None]
    assert _largest(rows)["busbw_gbps"] == 0.79


def test_wrong_counts_are_kept() -> None:
    rows = read_nccl_log(Path("all_reduce_perf.log"), (REAL / "dgx-h100-wrong-values.log").read_text())
    assert [row["wrong"] for row in rows[-2:]] == [237858, 238038]


def test_what_a_log_was_read_as_is_one_line() -> None:
    from benchctl.results.nccl_log import read_as

    text = (REAL / "dgx-spark-gb10-2ranks.log").read_text()
    assert read_as(read_nccl_log(Path("x.log"), text), text) == (
        "all_reduce, 2 ranks, 4 sizes, largest 65,536 B at busbw 0.96 GB/s (nccl-tests 2.20.0)")
    old = (REAL / "nccl-issue-340-11col.log").read_text()
    assert read_as(read_nccl_log(Path("broadcast_perf.log"), old), old) == (
        "broadcast, ? ranks, 12 sizes, largest 134,217,728 B at busbw 20.34 GB/s (nccl-tests version not printed)")


def test_import_reports_what_each_log_was_read_as(tmp_path: Path) -> None:
    from tests.conftest import cli_here

    records = tmp_path / "spark.yaml"
    records.write_text("- {provider: nvidia, gpu: GB10, count: 2, market: on-demand, hourly_usd: 1.0, "
                       "step_time_ms: 100, target_steps: 1000}\n")
    result = cli_here("import", str(records), str(REAL / "dgx-spark-gb10-2ranks.log"), home=tmp_path / "home")
    assert result.returncode == 0, result.stderr
    assert "dgx-spark-gb10-2ranks.log: all_reduce, 2 ranks, 4 sizes, largest 65,536 B at busbw 0.96 GB/s " \
           "(nccl-tests 2.20.0)" in result.stdout


def test_srun_l_labels_padded_for_ten_or_more_tasks_are_read() -> None:
    # 2 nodes × 8 tasks under `srun -l`: Slurm pads the task label to two digits (" 0: "), which the
    # reader left in place and so found no header line ("is this an nccl-tests log?")
    text = (REAL / "nccl-tests-290-2x-h100-16ranks-srun-l-padded.log").read_text()
    assert text.startswith(" 0: # nThread") and "\n 0:\n" in text + "\n"
    assert looks_like_nccl_log(text)
    rows = read_nccl_log(Path("all_reduce_perf.slurm-290.out"), text)
    assert {(row["op"], row["ranks"]) for row in rows} == {("all_reduce", 16)}
    assert (_largest(rows)["bytes"], _largest(rows)["busbw_gbps"]) == (8589934592, 155.57)
    assert len(rows) == 22 and {row["wrong"] for row in rows} == {None}


def test_padded_two_digit_task_labels_are_dropped(tmp_path: Path) -> None:
    # the same log as task 10 of a 16-task step would print it ("10: ")
    text = (REAL / "nccl-tests-290-2x-h100-16ranks-srun-l-padded.log").read_text().replace(" 0:", "10:")
    assert _largest(read_nccl_log(tmp_path / "all_reduce_perf.log", text))["busbw_gbps"] == 155.57


def test_a_datatype_all_log_ranks_on_float_and_reports_each_type(tmp_path: Path) -> None:
    # nccl-tests -d all on 2× 8 H200: twelve types, three sizes each. The old reader took the median of
    # every type's rows at the largest size (445.485 GB/s, no type measured that) and described int8's
    from benchctl.results.cell_evidence import largest_allreduce
    from benchctl.results.nccl_log import read_as

    text = (REAL / "h200-2node-all_reduce-datatype-all.log").read_text()
    rows = read_nccl_log(tmp_path / "x.log", text)
    assert len({row["dtype"] for row in rows}) == 12
    assert largest_allreduce(rows) == ((487.06 + 488.19) / 2, 42949672960)
    described = read_as(rows, text)
    assert "12 types" in described and "float 487.06 (ranked)" in described and "int8 390.12" in described
    bf16_only = [row for row in rows if row["dtype"] == "bfloat16"]  # one type: that one, as before
    assert largest_allreduce(bf16_only) == ((484.17 + 483.79) / 2, 42949672960)
    assert largest_allreduce([row for row in rows if row["dtype"] in ("half", "int8")]) is None


def test_the_report_plots_the_measured_type_of_a_datatype_all_import(tmp_path: Path) -> None:
    from benchctl.report.data import busbw_series_of

    rows = read_nccl_log(tmp_path / "x.log", (REAL / "h200-2node-all_reduce-datatype-all.log").read_text())
    series, _ = busbw_series_of(rows)
    assert series["all_reduce"] == [(10737418240, 484.55), (21474836480, 487.34), (42949672960, 487.06)]


def test_an_op_all_log_ranks_on_sum_and_reports_each_reduction(tmp_path: Path) -> None:
    # nccl-tests -o all (NVIDIA/nccl-tests#167): a row per reduction per size. The old reader dropped the
    # redop column and ranked the median of whichever reductions had the largest size (max's 3.07 GB/s),
    # plotted min over max where both measured a size, and described max's busbw as the run's
    from benchctl.report.data import busbw_series_of
    from benchctl.results.cell_evidence import largest_allreduce
    from benchctl.results.nccl_log import read_as

    text = (REAL / "nccl-tests-167-all_reduce-op-all-max-min.log").read_text()
    rows = read_nccl_log(tmp_path / "all_reduce_perf.log", text)
    assert largest_allreduce(rows) is None  # no sum: nothing ranked, as a -d all log without float
    assert {row["redop"] for row in rows} == {"max", "min"}
    assert busbw_series_of(rows)[0] == {}
    assert read_as(rows, text) == ("all_reduce, ? ranks, 2 reductions, 9 sizes, busbw GB/s at each reduction's "
                                   "largest size: max 3.06, min 2.99 (no sum: nothing ranked) (nccl-tests "
                                   "version not printed)")
    # derived (README): the min rows relabelled sum; sum now ends at 200,704 B, max at 204,800 B
    derived = text.replace("float     min", "float     sum")
    rows = read_nccl_log(tmp_path / "all_reduce_perf.log", derived)
    assert largest_allreduce(rows) == ((2.99 + 3.00) / 2, 200704)
    assert busbw_series_of(rows)[0]["all_reduce"] == [(196608, 2.94), (197632, 2.96), (198656, 2.98),
                                                       (199680, 2.98), (200704, 2.99)]
    assert "busbw GB/s at each reduction's largest size: sum 2.99 (ranked), max 3.06" in read_as(rows, derived)
    max_only = [row for row in rows if row["redop"] == "max"]  # one reduction: that one, as before
    assert largest_allreduce(max_only) == ((3.06 + 3.08) / 2, 204800)


def test_only_a_collective_with_several_reductions_is_narrowed_to_sum() -> None:
    # all_gather prints "none" in the redop column: a file with it and all_reduce -o all keeps all_gather
    from benchctl.results.cell_evidence import measured

    rows = [{"op": "all_gather", "redop": "none", "dtype": "float"}, {"op": "all_reduce", "redop": "max",
            "dtype": "float"}, {"op": "all_reduce", "redop": "sum", "dtype": "float"}, {"op": "x", "dtype": "float"}]
    assert measured(rows) == [rows[0], rows[2], rows[3]]


def test_each_collective_keeps_its_one_type_and_only_one_with_several_is_narrowed_to_float(tmp_path: Path) -> None:
    # composed (README): all_reduce in bfloat16 alone (the H200 -d all log's bfloat16 rows) and all_gather in
    # float (2x GB10). The old reader narrowed the whole file to float: all_reduce ranked nothing and was
    # not plotted, as if a collective measured in one type had been measured in several.
    from benchctl.report.data import busbw_series_of
    from benchctl.results.cell_evidence import largest_allreduce, measured_dtype
    from benchctl.results.nccl_log import read_as

    text = (REAL / "composed-all_reduce-bfloat16-h200-all_gather-float-gb10.log").read_text()
    rows = read_nccl_log(tmp_path / "x.log", text)
    assert {(row["op"], row["dtype"]) for row in rows} == {("all_reduce", "bfloat16"), ("all_gather", "float")}
    assert measured_dtype(rows) == rows
    assert largest_allreduce(rows) == ((484.17 + 483.79) / 2, 42949672960)
    series, _ = busbw_series_of(rows)
    assert series["all_reduce"][-1] == (42949672960, 484.17) and series["all_gather"][-1] == (4294967296, 22.14)
    # all_reduce in several types (the -d all log's twelve) beside all_gather: all_reduce narrowed to float
    datatype_all = read_nccl_log(tmp_path / "y.log", (REAL / "h200-2node-all_reduce-datatype-all.log").read_text())
    gather = [row for row in rows if row["op"] == "all_gather"]
    kept = measured_dtype(datatype_all + gather)
    assert {(row["op"], row["dtype"]) for row in kept} == {("all_reduce", "float"), ("all_gather", "float")}
    assert largest_allreduce(datatype_all + gather) == ((487.06 + 488.19) / 2, 42949672960)
    # ... and ranks nothing when it lacks float, saying so, while all_gather keeps its float
    no_float = [row for row in datatype_all if row["dtype"] in ("half", "bfloat16")] + gather
    assert largest_allreduce(no_float) is None
    assert list(busbw_series_of(no_float)[0]) == ["all_gather"]
    assert "2 types" in (described := read_as(no_float, text)) and "(no float: nothing ranked)" in described


def test_wrong_values_and_failed_runs_are_named() -> None:
    from benchctl.results.nccl_log import failures

    text = (REAL / "dgx-h100-wrong-values.log").read_text()
    found = failures(read_nccl_log(Path("all_reduce_perf.log"), text), text)
    assert found == ["2 results report wrong values (first: all_reduce 524,288 B float sum out-of-place, "
                     "237,858 wrong elements)"]
    footer = text + "# Out of bounds values : 2 FAILED\n# Avg bus bandwidth    : 0.53\n"
    assert "line 7: nccl-tests counted 2 checks with wrong values" in failures([], footer)[0]
    clean = (REAL / "dgx-spark-gb10-2ranks.log").read_text()
    assert failures(read_nccl_log(Path("x.log"), clean), clean) == []


def test_an_error_column_above_nccl_tests_bound_is_wrong(tmp_path: Path) -> None:
    # before 2.10 the column is the largest deviation: 2e-02 on float is far above 1e-05 × (ranks - 1);
    # the old reader took int(0.02) = 0 wrong elements, a clean result
    from benchctl.results.nccl_log import failures

    text = (REAL / "nccl-issue-340-11col.log").read_text()
    lines = text.splitlines()
    last = next(i for i in range(len(lines) - 1, -1, -1) if lines[i].strip() and not lines[i].startswith("#"))
    lines[last] = lines[last][::-1].replace("00+e0", "20-e2", 1)[::-1]
    bad = "\n".join(lines)
    rows = read_nccl_log(Path("broadcast_perf.log"), bad)
    assert rows[-1]["error"] == 2e-02 and rows[-1]["wrong"] is None
    assert "error 0.02 above nccl-tests' bound for float" in failures(rows, bad)[0]
    assert failures(read_nccl_log(Path("broadcast_perf.log"), text), text) == []


def test_a_run_cut_short_by_a_test_failure_is_refused_as_such() -> None:
    # alltoall on 2× 8 H800 died mid-row ("... -1 node0: Test CUDA failure common.cu:389 ..."): the old
    # reader refused it for its columns ("expected 13 columns ..., found 16"), not for the failure
    import pytest

    from benchctl.results.nccl_log import NcclLogError

    with pytest.raises(NcclLogError, match=r"the run failed .*Test CUDA failure common\.cu:389"):
        read_nccl_log(Path("x.log"), (REAL / "nccl-tests-355-alltoall-test-failure.log").read_text())


def test_import_refuses_a_log_with_wrong_values(tmp_path: Path) -> None:
    from tests.conftest import cli_here

    records = tmp_path / "dgx.yaml"
    records.write_text("- {provider: nvidia, gpu: H100_SXM, count: 8, market: on-demand, hourly_usd: 1.0, "
                       "step_time_ms: 100, target_steps: 1000}\n")
    log = tmp_path / "all_reduce_perf.log"
    log.write_text((REAL / "dgx-h100-wrong-values.log").read_text())
    result = cli_here("import", str(records), str(log), home=tmp_path / "home")
    assert result.returncode == 2, result.stdout
    assert "2 results report wrong values" in result.stderr and "not imported" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_run_the_ranking_leaves_out_says_so_though_it_holds_one_type(tmp_path: Path) -> None:
    # composed here from two real logs (README): all_reduce float on 2x GB10 then the composed file's
    # all_reduce bfloat16 on 2x 8 H200. The ranking narrows the file's all_reduce to float; the 16-rank
    # bfloat16 run was described as if ranked (it was grouped by collective and ranks, one type each)
    from benchctl.results.cell_evidence import largest_allreduce
    from benchctl.results.nccl_log import read_as

    text = ((REAL / "dgx-spark-gb10-2ranks.log").read_text()
            + (REAL / "composed-all_reduce-bfloat16-h200-all_gather-float-gb10.log").read_text())
    rows = read_nccl_log(tmp_path / "x.log", text)
    assert largest_allreduce(rows) == ((0.96 + 1.01) / 2, 65536)  # the float run, at 2 ranks
    runs = read_as(rows, text).split("; ")
    assert runs[0].startswith("all_reduce, 2 ranks,") and "not ranked" not in runs[0]
    assert runs[1].startswith("all_reduce, 16 ranks,")
    assert runs[1].endswith("(not ranked: the file's all_reduce ranks on its float rows, not bfloat16)")
    assert runs[2].startswith("all_gather, 2 ranks,") and "not ranked" not in runs[2]
