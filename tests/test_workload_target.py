"""Any workload gets a cost-to-train (issue 30 item 5): a campaign whose target gives steps, or
tokens and tokens per step, is priced from its ``command`` phase's own ``step_time_s`` metrics under
the same evidence rules as the profile's steps, and ranks like a profiled cell."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchctl.campaign.spec import Target, WorkloadTarget, parse_campaign
from benchctl.errors import SpecError
from tests.conftest import FAST_POLLS, run_cli

CAMPAIGN = """\
name: {name}
budget_usd: 5
target: {target}
defaults: {{market: on-demand, max_attempts: 1}}
payload:
  phases: [{phases}]
  command:
    run: |
{script}
matrix:
  - {{provider: local, gpu: cpu, count: 1, price_usd_per_hour: 2.0}}
"""
STEPS = """\
      printf '{"step": 0, "step_time_s": 9.0, "warmup": true}\\n' >> "$BENCHCTL_METRICS"
      printf '{"loss": 3.2}\\n' >> "$BENCHCTL_METRICS"
      for t in 0.5 0.7 0.6 0.9 0.6; do printf '{"step_time_s": %s}\\n' $t >> "$BENCHCTL_METRICS"; done"""
"""A training script's metrics: a warm-up step (not timed), a line without a step time, five timed
steps whose median is 0.6 s."""


def _spec(target: str, phases: str = "command", name: str = "mine") -> str:
    return CAMPAIGN.format(name=name, target=target, phases=phases, script="      true")


@pytest.mark.parametrize(("target", "steps"), [("{steps: 1000}", 1000),
                                               ("{tokens: 1000000, tokens_per_step: 4096}", 244)])
def test_a_workload_target_gives_its_steps(target: str, steps: int) -> None:
    spec = parse_campaign(_spec(target), "c.yaml").spec
    assert isinstance(spec.target, WorkloadTarget) and spec.target.train_steps() == steps
    assert spec.target_label() == "mine"  # ranked as the campaign unless it names itself


def test_a_nanochat_target_is_unchanged() -> None:
    spec = parse_campaign(_spec("{model: nanochat-d1, target_param_data_ratio: 8.5, total_batch_size: 128}"),
                          "c.yaml").spec
    assert isinstance(spec.target, Target) and spec.target_label() == "nanochat-d1"


@pytest.mark.parametrize(("target", "phases", "said"), [
    ("{steps: 10, tokens: 100, tokens_per_step: 10}", "command", "not both forms"),
    ("{tokens: 100}", "command", "go together"),
    ("{tokens: 10, tokens_per_step: 100}", "command", "makes 0 steps"),
    ("{steps: 0}", "command", "target.steps"),
    ("{steps: 10, name: x, stepz: 1}", "command", "target.stepz: unknown key"),
    ("{steps: 10}", "preflight, profile", "remove profile from payload.phases"),
    ("{steps: 10}", "preflight", "add command to payload.phases"),
])
def test_a_bad_workload_target_is_one_clear_error(target: str, phases: str, said: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_campaign(_spec(target, phases), "c.yaml")
    assert said in str(caught.value), str(caught.value)
    assert ".workload" not in str(caught.value)  # the union's tag is no key of the file


@pytest.mark.slow
def test_a_command_with_step_times_is_priced_and_ranked(tmp_path: Path) -> None:
    home = tmp_path / "home"
    path = tmp_path / "mine.yaml"
    path.write_text(CAMPAIGN.format(name="mine", target="{steps: 10000, name: my-llama}", phases="command",
                                    script=STEPS))
    ran = run_cli("run", str(path), *FAST_POLLS, home=home, timeout=300)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    board = run_cli("leaderboard", "--format", "json", home=home)
    (row,) = json.loads(board.stdout)
    assert row["model"] == "my-llama" and row["rank"] == 1 and row["target_steps"] == 10_000
    assert row["step_time_ms"] == pytest.approx(600.0)  # the median of the five timed steps, not the warm-up
    assert row["cost_to_train_usd"] == pytest.approx(0.6 * 10_000 / 3600 * 2.0)
    assert (row["step_time_p10_ms"], row["step_time_p90_ms"]) == (pytest.approx(540.0), pytest.approx(820.0))


@pytest.mark.slow
def test_an_implausible_command_step_time_makes_no_result(tmp_path: Path) -> None:
    home = tmp_path / "home"
    path = tmp_path / "bad.yaml"
    script = """\
      printf '{"step_time_s": 0.5}\\n' >> "$BENCHCTL_METRICS"
      printf '{"step_time_s": 1e-12}\\n' >> "$BENCHCTL_METRICS\""""
    path.write_text(CAMPAIGN.format(name="bad", target="{tokens: 1000000, tokens_per_step: 1000}",
                                    phases="command", script=script))
    ran = run_cli("run", str(path), *FAST_POLLS, home=home, timeout=300)
    board = run_cli("leaderboard", "--format", "json", home=home)
    (row,) = json.loads(board.stdout)
    assert row["cost_to_train_usd"] is None, ran.stdout + ran.stderr
    assert "'step_time_s' is 1e-12 s, outside the plausible" in (row["no_result"] or ""), row
