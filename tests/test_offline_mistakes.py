"""Mistakes named offline, at ``plan`` (issue 29 item 4): a GPU name no provider or node check knows
is refused with the names to use (not found later as "no offer now"); a campaign file that does not
exist names the close match beside it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import TINY_CAMPAIGN, cli_here


@pytest.mark.parametrize(("cell", "name"), [
    ("{provider: local, gpu: CPU1, count: 1, price_usd_per_hour: 1}", "CPU1"),
    ("{provider: runpod, gpu: H100SXM, count: 8}", "H100SXM"),
])
def test_a_wrong_gpu_name_is_refused_at_plan_with_the_names_to_use(home: Path, tmp_path: Path, cell: str,
                                                                    name: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(TINY_CAMPAIGN.format(name="c", matrix=f"  - {cell}", steps=3, max_attempts=1))
    result = cli_here("plan", str(path), home=home)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert f"c.yaml:9 matrix[0].gpu: unknown GPU model {name!r}; known: cpu, H100_SXM" in result.stderr, \
        result.stderr
    assert "offer" not in result.stderr


def test_a_missing_campaign_file_names_the_close_match_beside_it(home: Path, tmp_path: Path) -> None:
    (tmp_path / "h100-matrix.yaml").write_text("name: x\n")
    (tmp_path / "local-smoke.yaml").write_text("name: y\n")
    result = cli_here("plan", str(tmp_path / "h100-matrx.yaml"), home=home)
    assert result.returncode == 2
    assert f"h100-matrx.yaml: no such file; did you mean {tmp_path / 'h100-matrix.yaml'}?" in result.stderr, \
        result.stderr
    nothing = cli_here("plan", str(tmp_path / "other.yaml"), home=home)
    assert "other.yaml: no such file; check the path" in nothing.stderr
