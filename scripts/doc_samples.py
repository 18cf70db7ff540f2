"""Regenerate every example output in the docs from real commands (issue 29 item 8), so none can drift.

    .venv/bin/python scripts/doc_samples.py [--check]

A sample in README.md or docs/*.md is a fenced block between ``<!-- sample: NAME -->`` and
``<!-- /sample -->``; NAME is one of ``SAMPLES``. This script runs two real local campaigns in a
temporary BENCHCTL_HOME (``campaigns/local-smoke.yaml``, what the quick start runs, and the test
suite's three-cell campaign ``tests/local_campaign.py`` REPORT_CAMPAIGN, whose spot cell fails
preflight on purpose), runs each sample's command on a pseudo-terminal 80 columns wide (as a user
sees it) and writes what it printed into the block. ``--check`` writes nothing and exits 1 when a
committed block differs in structure (``shape``) from what the command prints now.

``tests/test_doc_samples.py`` renders the same samples with ``render`` against the stores the suite
already has (the report tests' campaign, and the tiny two-cell campaign for the quick start's
leaderboard: the same matrix as local-smoke) and compares them with ``same_shape``: numbers vary
run to run, the text, headers, column names and rows may not. About 20 s here (two cores).
"""

from __future__ import annotations

import argparse
import fcntl
import os
import pty
import re
import struct
import subprocess
import sys
import tempfile
import termios
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
WIDTH = 80
WIDE = 400
"""A terminal wide enough for every column a command shows (``same_shape``)."""
DOCS = (REPO / "README.md", *sorted((REPO / "docs").glob("*.md")))
BEGIN = re.compile(r"^<!-- sample: (?P<name>[\w-]+) -->\n```\n(?P<body>.*?)```\n<!-- /sample -->$", re.M | re.S)
ANY_MARKER = re.compile(r"^<!-- sample: (?P<name>[^ ]+)", re.M)
FAST_POLLS = ("--poll-interval", "0.1", "--status-interval", "0.5")


@dataclass(frozen=True)
class Sample:
    """``benchctl ARGV`` (``{file}`` = the campaign file) run in the store of ``campaign`` (``rep``,
    ``local-smoke``, or None: it needs no store); ``shown`` is the command line the doc shows above
    the output (``$ …``); ``stderr``: the block shows stderr too, and the exit code; ``head``: only
    the first lines are shown (what follows depends on the machine, e.g. its CPU model), then ``…``;
    ``in_repo``: it runs in the repository (its arguments name the tests' fixtures), not in ``cwd``."""

    name: str
    argv: tuple[str, ...]
    campaign: str | None
    shown: str
    stderr: bool = False
    head: int | None = None
    in_repo: bool = False


SAMPLES = (
    Sample("quickstart-leaderboard", ("leaderboard",), "local-smoke", "benchctl leaderboard"),
    Sample("plan", ("plan", "{file}"), "rep", "benchctl plan rep.yaml"),
    Sample("status", ("status",), "rep", "benchctl status"),
    Sample("logs", ("logs", "local:cpux2:spot"), "rep", "benchctl logs local:cpux2:spot", head=11),
    Sample("leaderboard", ("leaderboard",), "rep", "benchctl leaderboard"),
    Sample("predict", ("predict", "--model", "nanochat-d26", "--gpu", "H100_SXM", "--count", "8"), None,
           "benchctl predict --model nanochat-d26 --gpu H100_SXM --count 8"),
    Sample("preflight-replay", ("preflight", "--replay", "tests/fixtures/preflight/h100-sxm-numa-split"), None,
           "benchctl preflight --replay tests/fixtures/preflight/h100-sxm-numa-split", in_repo=True),
    Sample("campaign-error", ("run", "campaigns/h100.yaml"), None, "benchctl run campaigns/h100.yaml",
           stderr=True),
)
BAD_CAMPAIGN = """\
# campaigns/h100.yaml: a matrix whose second cell asks for no GPU
name: h100
budget_usd: 400
target: {model: nanochat-d26, target_param_data_ratio: 8.5, total_batch_size: 524288}
defaults: {market: on-demand}
matrix:
  - {provider: runpod, gpu: H100_SXM, count: 8}
  - {provider: vastai, gpu: H100_SXM, count: 0}
"""
"""The file behind the ``campaign-error`` sample, written into its working folder."""


def on_terminal(argv: tuple[str, ...], home: Path, cwd: Path, *, stderr: bool = False,
                width: int = WIDTH) -> tuple[str, int]:
    """(what ``benchctl ARGV`` printed on a pseudo-terminal ``width`` columns wide, its exit code):
    stdout (and stderr when asked), escape sequences removed, no provider credentials in reach."""
    controller, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 40, width, 0, 0))
    env = {**os.environ, "BENCHCTL_HOME": str(home), "COLUMNS": str(width), "LINES": "40",
           "TERM": "xterm-256color", "AWS_SHARED_CREDENTIALS_FILE": str(home / "no-aws"),
           "AWS_CONFIG_FILE": str(home / "no-aws"), "BENCHCTL_PROGRESS": "plain"}
    for name in ("BENCHCTL_DB", "RUNPOD_API_KEY", "VAST_API_KEY", "AWS_PROFILE", "AWS_ACCESS_KEY_ID",
                 "AWS_SECRET_ACCESS_KEY", "NO_COLOR", "FORCE_COLOR"):
        env.pop(name, None)
    process = subprocess.Popen([sys.executable, "-m", "benchctl", *argv], stdin=terminal, stdout=terminal,
                               stderr=terminal if stderr else subprocess.DEVNULL, env=env, cwd=cwd,
                               close_fds=True)
    os.close(terminal)
    out = b""
    while True:
        try:
            chunk = os.read(controller, 65536)
        except OSError:  # the terminal closed: the process is gone
            break
        if not chunk:
            break
        out += chunk
    code = process.wait(timeout=120)
    os.close(controller)
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.decode()).replace("\r\n", "\n"), code


def render(sample: Sample, home: Path, file: Path | None, cwd: Path, width: int = WIDTH) -> str:
    """The block of ``sample``: its command line, what it printed at ``width`` columns (and, for a
    sample with stderr, ``$ echo $?`` and the exit code). ``cwd`` holds ``BAD_CAMPAIGN`` for
    the error sample (``write_bad_campaign``)."""
    argv = tuple(a.format(file=file) for a in sample.argv)
    text, code = on_terminal(argv, home, REPO if sample.in_repo else cwd, stderr=sample.stderr, width=width)
    lines = [line.rstrip() for line in text.rstrip("\n").splitlines()]
    if sample.head is not None and len(lines) > sample.head:
        lines = [*lines[:sample.head], "…"]
    lines.insert(0, f"$ {sample.shown}")
    if sample.stderr:
        lines += ["$ echo $?", str(code)]
    return "\n".join(lines) + "\n"


def write_bad_campaign(folder: Path) -> None:
    (folder / "campaigns").mkdir(parents=True, exist_ok=True)
    (folder / "campaigns" / "h100.yaml").write_text(BAD_CAMPAIGN)


RULE = re.compile(r"^─+$")


@dataclass(frozen=True)
class Shape:
    """What may not change without regenerating the docs, numbers (``18.9``, ``17,410``,
    ``16:19:13``, ``0.0008``) written as ``0``: ``text``, the words of every line outside a table's
    header and rows (titles, summaries, footers such as ``(11 more columns …)``), whitespace runs
    and where a long line wraps ignored (a number one digit longer moves the wrap); ``header``, the
    words of the column names shown; ``rows``, the first word of each row (``1``, ``local:cpux0:spot``).

    At 80 columns which columns fit depends on the values (a ``drift -6.9%`` flag takes the width
    that a ``model`` column had), so ``same_shape`` asks of the header only that every column word
    shown is one the command shows on a wide terminal now."""

    text: tuple[str, ...]
    header: frozenset[str]
    rows: tuple[str, ...]


def shape(text: str) -> Shape:
    """The ``Shape`` of a block: a table is the line of ``─`` under its header (one line, or two
    when the first starts with a space), its rows the lines after it (a row's wrapped lines start
    with a space) up to a line that starts with ``(``, or the end."""
    lines = [line for line in re.sub(r"\d+(?:[.,:\-]\d+)*", "0", text).splitlines() if line.strip()]
    words: list[str] = []
    header: set[str] = set()
    rows: list[str] = []
    rule = next((i for i, line in enumerate(lines) if RULE.match(line)), None)
    if rule is None:
        return Shape(tuple(" ".join(lines).split()), frozenset(), ())
    first = rule - 2 if rule >= 2 and lines[rule - 2].startswith(" ") else rule - 1
    end = next((i for i in range(rule + 1, len(lines)) if lines[i].startswith("(")), len(lines))
    for line in lines[first:rule]:
        header.update(re.findall(r"[^\W_\d]+", line))
    rows = [line.split()[0] for line in lines[rule + 1:end] if not line.startswith(" ")]
    words = " ".join(lines[:first] + lines[end:]).split()
    return Shape(tuple(words), frozenset(header), tuple(rows))


def same_shape(committed: str, now: str, wide: str) -> bool:
    """``committed`` and ``now`` (both at 80 columns) have the same text and rows, and every column
    word either shows is one of the columns ``wide`` (the same command on a wide terminal) shows."""
    old, new, every = shape(committed), shape(now), shape(wide)
    return (old.text, old.rows) == (new.text, new.rows) and old.header | new.header <= every.header


def committed(docs: tuple[Path, ...] = DOCS) -> dict[str, tuple[Path, str]]:
    """Every sample block in ``docs``: name → (file, body). A marker without a well-formed block,
    or one name twice, is an error."""
    found: dict[str, tuple[Path, str]] = {}
    for path in docs:
        text = path.read_text()
        blocks = list(BEGIN.finditer(text))
        if len(blocks) != len(ANY_MARKER.findall(text)):
            raise ValueError(f"{path}: a <!-- sample: NAME --> marker without ``` block and <!-- /sample -->")
        for block in blocks:
            if block["name"] in found:
                raise ValueError(f"{path}: sample {block['name']} is also in {found[block['name']][0]}")
            found[block["name"]] = (path, block["body"])
    return found


def rewrite(rendered: dict[str, str], docs: tuple[Path, ...] = DOCS) -> list[Path]:
    """Replace each marked block's body with ``rendered[name]``; the files changed."""
    changed = []
    for path in docs:
        text = path.read_text()
        new = BEGIN.sub(lambda m: f"<!-- sample: {m['name']} -->\n```\n{rendered[m['name']]}```\n<!-- /sample -->",
                        text)
        if new != text:
            path.write_text(new)
            changed.append(path)
    return changed


def run_campaign(home: Path, file: Path) -> None:
    env = {**os.environ, "BENCHCTL_HOME": str(home), "BENCHCTL_LOCAL_LOCK": str(home.parent / "local.lock")}
    env.pop("BENCHCTL_DB", None)
    subprocess.run([sys.executable, "-m", "benchctl", "run", str(file), *FAST_POLLS], env=env, cwd=REPO,
                   capture_output=True, text=True, timeout=600)  # rep exits 1: its spot cell fails on purpose


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a block's shape differs")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    from tests.local_campaign import REPORT_CAMPAIGN

    with tempfile.TemporaryDirectory(prefix="doc-samples-") as tmp:
        root = Path(tmp)
        files = {"local-smoke": REPO / "campaigns" / "local-smoke.yaml", "rep": root / "rep.yaml"}
        files["rep"].write_text(REPORT_CAMPAIGN)
        homes = {name: root / name / "home" for name in files}
        for name, file in files.items():
            homes[name].parent.mkdir()
            run_campaign(homes[name], file)
        write_bad_campaign(root)
        os.environ["BENCHCTL_LOCAL_LOCK"] = str(root / "local.lock")
        wide: dict[str, str] = {}
        rendered = {}
        for sample in SAMPLES:
            where = (homes.get(sample.campaign or "", root / "empty-home"), files.get(sample.campaign or ""), root)
            rendered[sample.name] = render(sample, *where)
            if args.check:
                wide[sample.name] = render(sample, *where, width=WIDE)
    blocks = committed()
    missing = sorted(set(rendered) - set(blocks))
    unknown = sorted(set(blocks) - set(rendered))
    if missing or unknown:
        print(f"samples without a block: {missing}; blocks without a sample: {unknown}", file=sys.stderr)
        return 1
    if args.check:
        stale = [n for n, body in rendered.items() if not same_shape(blocks[n][1], body, wide[n])]
        for name in stale:
            print(f"{blocks[name][0].relative_to(REPO)}: sample {name} is out of date", file=sys.stderr)
        return 1 if stale else 0
    for path in rewrite(rendered):
        print(f"rewrote {path.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
