"""Commands pay only for what they use (issue 31 item 14): ``--help`` loads no pydantic, no SQLAlchemy,
no store; ``plan`` of a local campaign (which never opens the database) loads no SQLAlchemy and no
store models. Checked by running the real ``main`` in a fresh interpreter and reading ``sys.modules``
afterwards (structure, not time: the time is in docs/measurements/2026-11-26-read-paths.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO

HEAVY = ("pydantic", "sqlalchemy", "sqlalchemy.orm", "sqlmodel", "benchctl.store.models", "benchctl.store.database",
         "benchctl.provisioners.base", "matplotlib", "rich", "yaml", "alembic", "benchctl.campaign.spec",
         "benchctl.provisioners.registry")

_PROBE = ("import json, sys\nfrom benchctl.cli.main import main\ncode = 0\ntry:\n    main(sys.argv[1:])\n"
          "except SystemExit as exc:\n    code = exc.code\n"
          f"print(json.dumps({{'exit': code, 'loaded': sorted(m for m in {HEAVY!r} if m in sys.modules)}}), "
          "file=sys.stderr)\n")


def _loaded_after(*argv: str, home: Path) -> tuple[int, list[str]]:
    env = {**os.environ, "BENCHCTL_HOME": str(home)}
    env.pop("BENCHCTL_DB", None)
    done = subprocess.run([sys.executable, "-c", _PROBE, *argv], capture_output=True, text=True, cwd=REPO, env=env,
                          timeout=120)
    last = done.stderr.strip().splitlines()[-1]
    found = json.loads(last)
    return found["exit"], found["loaded"]


def test_help_loads_no_pydantic_no_sqlalchemy_no_store(tmp_path: Path) -> None:
    code, loaded = _loaded_after("--help", home=tmp_path)
    assert code == 0
    assert loaded == []


def test_a_command_help_loads_nothing_heavy(tmp_path: Path) -> None:
    for command in ("status", "report", "leaderboard", "plan"):
        code, loaded = _loaded_after(command, "--help", home=tmp_path)
        assert code == 0 and loaded == [], (command, loaded)


def test_plan_of_a_local_campaign_never_loads_the_store(tmp_path: Path) -> None:
    code, loaded = _loaded_after("plan", str(REPO / "campaigns" / "local-smoke.yaml"), home=tmp_path)
    assert code == 0
    assert not {"sqlalchemy", "sqlmodel", "benchctl.store.models", "benchctl.store.database",
                "matplotlib"} & set(loaded), loaded
    assert "pydantic" in loaded  # the campaign spec is pydantic: plan pays for what it uses
    assert not (tmp_path / "benchctl.db").exists()


def test_an_error_outside_a_provider_still_gets_one_line(tmp_path: Path) -> None:
    """The lazily imported ProviderError keeps the one error path: a bad campaign file is one line, exit 2."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nbudget_usd: -1\n")
    done = subprocess.run([sys.executable, "-m", "benchctl", "plan", str(bad)], capture_output=True, text=True,
                          cwd=REPO, env={**os.environ, "BENCHCTL_HOME": str(tmp_path)}, timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr


def test_import_of_records_loads_no_campaign_spec_no_alembic_no_yaml(tmp_path: Path) -> None:
    """``import`` needs a Target and the campaign-name rule (``campaign/target.py``), not the campaign
    spec with its provider registry; no alembic (imported only to migrate an older store): a new
    store is created at the newest schema without it, a store already at the newest schema is not
    migrated; no PyYAML for a plain JSON file (only the general reading, or naming a line, needs it)."""
    records = tmp_path / "records.json"
    records.write_text(json.dumps([{"provider": "runpod", "gpu": "H100", "count": 8, "market": "spot",
                                    "hourly_usd": 20.0, "step_time_ms": 300.0, "target_steps": 1000}]))
    for campaign in ("first", "second"):  # a new store, then a current one
        code, loaded = _loaded_after("import", str(records), "--campaign", campaign, home=tmp_path)
        assert code == 0
        assert not {"alembic", "yaml", "benchctl.campaign.spec", "benchctl.provisioners.registry",
                    "benchctl.provisioners.base", "matplotlib"} & set(loaded), (campaign, loaded)


def test_import_of_records_writes_without_the_orm(tmp_path: Path) -> None:
    """``import`` of a records file writes with SQLAlchemy Core on the tables' names
    (``store/imports.py``): no ORM, no SQLModel, no store models, into a new store or a current one."""
    records = tmp_path / "records.json"
    records.write_text(json.dumps([{"provider": "runpod", "gpu": "H100", "count": 8, "market": "spot",
                                    "hourly_usd": 20.0, "step_time_ms": 300.0, "target_steps": 1000}]))
    for campaign in ("first", "second"):
        code, loaded = _loaded_after("import", str(records), "--campaign", campaign, home=tmp_path)
        assert code == 0
        assert not {"sqlalchemy.orm", "sqlmodel", "benchctl.store.models"} & set(loaded), (campaign, loaded)
