"""The report's ranking across campaigns ranks like with like, as ``benchctl leaderboard`` does
(issue 29 item 2): campaigns of one model over different target steps get a table each, never one
ranking where the longer target looks +1098.7 % dearer."""

from __future__ import annotations

import re

from benchctl.report.data import CampaignData
from benchctl.report.html import ranking
from benchctl.results.leaderboard import COLUMNS


def _campaign(name: str, steps: int, cost: float) -> CampaignData:
    row = {**dict.fromkeys(COLUMNS), "campaign": name, "cell": "local:cpux1:on-demand", "gpu": "cpu", "count": 1,
           "market": "on-demand", "model": "nanochat-d1", "precision": "f32", "target_steps": steps,
           "hourly_usd": 0.5, "step_time_ms": 40.0, "cost_to_train_usd": cost, "flags": [], "env": {}}
    return CampaignData(name=name, budget_usd=5.0, spent_usd=0.0, model="nanochat-d1", tokens_per_step=128,
                        cells=[], spend_curve=[], spend_by_provider={}, now=0.0, reference=None,
                        phases=("profile",), leaderboard=[row])


def test_campaigns_over_different_target_steps_are_ranked_apart() -> None:
    html = ranking([(_campaign("short", 1_451, 0.1), {}), (_campaign("long", 17_410, 1.2), {})])
    tables = re.findall(r'<table id="ranking-\d+">(.*?)</table>', html)
    assert len(tables) == 2, html
    assert "+1" not in html and html.count("cheapest</td>") == 2
    titles = re.findall(r'<h3 id="ranking-\d+-title">(.*?)</h3>', html)
    assert titles == ["nanochat-d1, 1,451 target steps", "nanochat-d1, 17,410 target steps"]


def test_one_target_is_one_ranking() -> None:
    html = ranking([(_campaign("a", 17_410, 0.1), {}), (_campaign("b", 17_410, 0.2), {})])
    assert len(re.findall(r'<table id="ranking-\d+">', html)) == 1
    assert "+100.0 %" in html and re.findall(r'<h3 id="ranking-\d+-title">(.*?)</h3>', html) == ["nanochat-d1"]
