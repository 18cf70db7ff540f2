"""Shared fixtures: a private BENCHCTL_HOME, the store on SQLite and on the machine's PostgreSQL,
a tiny local campaign, and a way to run the real CLI as a subprocess."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import click
import pytest
import sqlalchemy as sa
from click.testing import CliRunner

REPO = Path(__file__).resolve().parent.parent
PG_URL = os.environ.get("BENCHCTL_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")

TINY_CAMPAIGN = """\
name: {name}
budget_usd: 5
target: {{model: nanochat-d1, vocab_size: 512, target_param_data_ratio: 8.5, total_batch_size: 128}}
defaults: {{market: on-demand, max_attempts: {max_attempts}}}
payload:
  phases: [preflight, profile]
  profile: {{device_batch_size: 2, sequence_len: 32, warmup_steps: 1, steps: {steps}}}
matrix:
{matrix}
"""
FAST_POLLS = ("--poll-interval", "0.1", "--status-interval", "0.5")
"""For ``run``/``resume`` of local campaigns: a payload's end is seen within 0.1 s, not 1 s."""
TWO_LOCAL_CELLS = """\
  - {provider: local, gpu: cpu, count: 1, price_usd_per_hour: 0.5}
  - {provider: local, gpu: cpu, count: 2, price_usd_per_hour: 1.0}
"""


@pytest.fixture(autouse=True)
def _private_local_machine_lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test's local nodes take a lock of their own (``benchctl.provisioners.local.machine_lock``), so
    tests running side by side (xdist workers) do not wait for each other's nodes."""
    monkeypatch.setenv("BENCHCTL_LOCAL_LOCK", str(tmp_path / "local-machine.lock"))


@pytest.fixture(autouse=True)
def _no_public_listing_online(monkeypatch: pytest.MonkeyPatch) -> None:
    """Vast's public listing (priced without a key: ``provisioners.vastai.public_price``) is asked at
    VAST_URL: a closed loopback port unless a test serves a fake there, so no test reaches the network."""
    monkeypatch.setenv("VAST_URL", "http://127.0.0.1:9")


@pytest.fixture(autouse=True)
def _no_runpod_key_left_behind() -> Iterator[None]:
    """The RunPod provider hands its key to the SDK's module global (``runpod.api_key``), which an
    in-process CLI run of a later test would take for configured credentials: each test starts without."""
    yield
    module = sys.modules.get("runpod")
    if module is not None:
        module.api_key = None  # type: ignore[attr-defined]


Tokens = Callable[[str], str]
"""The ``tok`` fixture's type."""


@pytest.fixture
def tok() -> Tokens:
    """``tok("a")``: a node token this test alone uses (the same for the same word within the test).
    A local node's processes are found by their token's marker machine-wide
    (``provisioners.local.processes``): two tests naming a node alike at once (xdist workers, two
    people's runs on one machine, more often the busier it is) end each other's nodes."""
    run = uuid.uuid4().hex[:8]
    return lambda word: f"tok-{word}-{run}"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "home"
    monkeypatch.setenv("BENCHCTL_HOME", str(path))
    monkeypatch.delenv("BENCHCTL_DB", raising=False)
    return path


@pytest.fixture
def write_campaign(tmp_path: Path) -> Callable[..., Path]:
    """Write a tiny local campaign (runs in seconds on CPU) and return its path."""

    def write(name: str = "tiny", matrix: str = TWO_LOCAL_CELLS, steps: int = 3, max_attempts: int = 2,
              python: Path | None = None) -> Path:
        """``python``: the local nodes' ``providers.local.python`` (e.g. the ``standin_python`` fixture)."""
        path = tmp_path / f"{name}.yaml"
        text = TINY_CAMPAIGN.format(name=name, matrix=matrix, steps=steps, max_attempts=max_attempts)
        path.write_text(text + (f'providers:\n  local: {{python: "{python}"}}\n' if python else ""))
        return path

    return write


STANDIN = REPO / "tests" / "fakes" / "payload_standin.py"


@pytest.fixture
def standin_python(tmp_path: Path) -> Iterator[Path]:
    """A command to give as a provider's ``python``: the real payload runner with ranks that import no
    torch (``tests/fakes/payload_standin.py``). The test fails if no payload ran through it."""
    command = tmp_path / "standin-python"
    command.write_text(f'#!/bin/sh\nexec {sys.executable} {STANDIN} "$0" "$@"\n')
    command.chmod(0o755)
    yield command
    runs = Path(f"{command}.log")
    assert runs.exists() and " run " in f" {runs.read_text()}", "no payload ran through the stand-in"


@pytest.fixture
def profile_hold(standin_python: Path) -> Iterator[Path]:
    """A file whose presence makes the stand-in's profile wait after its first timed step: a test that
    must act while a profile runs (preempt, kill, interrupt, down) does so however slow the machine,
    then removes it (and it is removed after the test in any case)."""
    hold = Path(f"{standin_python}.hold")
    hold.touch()
    yield hold
    hold.unlink(missing_ok=True)


def _pg_unavailable() -> str | None:
    try:
        engine = sa.create_engine(PG_URL)
        with engine.connect() as conn:
            conn.execute(sa.text("select 1"))
        engine.dispose()
    except Exception as exc:
        return f"no PostgreSQL answers at {PG_URL}: {exc.__class__.__name__}"
    return None


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A URL on the machine's PostgreSQL whose search_path is a fresh schema, dropped afterwards."""
    reason = _pg_unavailable()
    if reason:
        print(f"skipping: {reason}")
        pytest.skip(reason)
    with pg_schema_url() as url:
        yield url


@contextlib.contextmanager
def pg_schema_url() -> Iterator[str]:
    """Another fresh schema beside ``pg_url``'s (a test that needs two databases), dropped on exit."""
    schema = f"bt_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(PG_URL)
    with admin.begin() as conn:
        conn.execute(sa.text(f"CREATE SCHEMA {schema}"))
    try:
        yield f"{PG_URL}?options=-csearch_path%3D{schema}"
    finally:
        with admin.begin() as conn:
            conn.execute(sa.text(f"DROP SCHEMA {schema} CASCADE"))
        admin.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'store.db'}"
    return str(request.getfixturevalue("pg_url"))


def run_cli(*args: str, home: Path, timeout: float = 180, env: dict[str, str] | None = None,
            ) -> subprocess.CompletedProcess[str]:
    """Run the real ``benchctl`` in a subprocess with BENCHCTL_HOME = ``home``."""
    full_env = {**os.environ, "BENCHCTL_HOME": str(home), **(env or {})}
    if "BENCHCTL_DB" not in (env or {}):
        full_env.pop("BENCHCTL_DB", None)
    return subprocess.run([sys.executable, "-m", "benchctl", *args], capture_output=True, text=True,
                          timeout=timeout, env=full_env, cwd=REPO)


def cli_here(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    """``benchctl ARGS`` in this process through click's ``CliRunner`` (no interpreter start-up,
    about a second less than ``run_cli``), with BENCHCTL_HOME = ``home`` and no BENCHCTL_DB: the same
    ``main``, exit codes and messages. For commands that start no node and install no signal
    handler (leaderboard, import, status)."""
    result = _RUNNER.invoke(_MAIN, list(args), env={"BENCHCTL_HOME": str(home), "BENCHCTL_DB": None},
                            catch_exceptions=False)
    return subprocess.CompletedProcess(list(args), result.exit_code, result.stdout, result.stderr)


def _main(argv: tuple[str, ...]) -> None:
    from benchctl.cli.main import main

    main(list(argv))


_MAIN = click.Command("benchctl", callback=_main, add_help_option=False,
                      params=[click.Argument(["argv"], nargs=-1, type=click.UNPROCESSED)],
                      context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
"""``benchctl.cli.main.main`` as a click command, so that ``CliRunner`` runs it with its error mapping."""
try:
    _RUNNER = CliRunner(mix_stderr=False)  # click < 8.2 mixes stderr by default
except TypeError:  # click >= 8.2: stderr is kept apart always
    _RUNNER = CliRunner()


def run_once(factory: pytest.TempPathFactory, name: str, campaign: str) -> tuple[Path, Path, str]:
    """(BENCHCTL_HOME, campaign file, what ``benchctl run`` printed) of ``campaign`` run once per test run.

    pytest-xdist's workers share the run's temporary root: the first worker to take the lock runs
    the campaign, the others wait for it and reuse the store. Read it, or copy it (``copy_home``)
    before writing to it."""
    shared = os.environ.get("PYTEST_XDIST_WORKER") is not None
    root = (factory.getbasetemp().parent if shared else factory.getbasetemp()) / f"run-once-{name}"
    root.mkdir(exist_ok=True)
    home, path = root / "home", root / f"{name}.yaml"
    with (root / "lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (root / "done").exists():
            path.write_text(campaign)
            result = run_cli("run", str(path), *FAST_POLLS, home=home, timeout=300)
            (root / "done").write_text(f"exit {result.returncode}\n{result.stdout}{result.stderr}")
    return home, path, (root / "done").read_text()


def copy_home(source: Path, home: Path) -> None:
    """A private copy of a finished BENCHCTL_HOME (its SQLite store and node folders) at ``home``."""
    shutil.copytree(source, home, symlinks=True)
