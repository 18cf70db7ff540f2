"""``benchctl import FILE...``: result records and nccl-tests logs join the store.

Every file is read and checked before anything is written; then one transaction stores it all
(``benchctl.store.imports``). Records go to ``--campaign`` when given, else to the campaign they name
(``leaderboard --format json`` rows do: an export of several campaigns imports back into them),
else to ``imported``. A ``.json``/``.yaml``/``.yml`` file holds result records
(``benchctl.results.records``); any other file must be an nccl-tests log (``benchctl.results.nccl_log``),
whose rows belong to the cell named by ``config`` (a cell of the import campaign, existing or
imported in the same command; optional when the campaign has one cell). One import takes the rows
of nccl-tests' own collectives and of at most a few other collective names
(``benchctl.results.collective_names``); a log left with no rows is not imported, and the summary
says in one line what was left out.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.engine import Engine

from benchctl.campaign.target import check_campaign_name
from benchctl.errors import SpecError, UsageError
from benchctl.results.collective_names import Names
from benchctl.results.records import read_records
from benchctl.store.imports import (
    CellCollectives,
    CellResult,
    NotAnImportCampaign,
    UnknownCell,
    cell_counts,
    save_import,
)

RECORD_SUFFIXES = (".json", ".yaml", ".yml")
DEFAULT_CAMPAIGN = "imported"


@dataclass(frozen=True)
class ImportSummary:
    campaign: str
    """The campaigns written, comma-separated."""
    results: int
    skipped: int
    collectives: int
    logs_read_as: tuple[str, ...] = ()
    """Per nccl-tests log: ``path: what it was read as`` (``nccl_log.read_as``), so a misread shows."""
    left_out: str = ""
    """One line naming the collectives left out (``collective_names``), or ''."""


def import_files(engine: Engine, files: list[Path], campaign: str | None, config: str | None) -> ImportSummary:
    results: list[CellResult] = []
    logs: list[tuple[Path, list[dict], str]] = []
    skipped = 0
    came_from: dict[tuple[str, str], Path] = {}
    name = campaign or DEFAULT_CAMPAIGN
    try:
        check_campaign_name(name)
    except ValueError as exc:
        raise UsageError(f"--campaign: {exc}") from None
    for path in files:
        if not path.is_file():
            raise UsageError(f"{path}: no such file")
        try:
            if path.suffix.lower() not in RECORD_SUFFIXES:
                logs.append((path, *_nccl_rows(path)))
                continue
            found, dropped = read_records(path, own_campaign=not campaign)
        except OSError as exc:
            raise UsageError(f"{path}: cannot read it ({exc.strerror or exc.__class__.__name__})") from None
        for item in found:
            where = (item.campaign or name, item.key)
            if where in came_from:
                raise SpecError(str(path), None, "", f"the cell {item.key!r} of campaign {where[0]!r} is also "
                                f"in {came_from[where]}; import the files one at a time (--campaign each) or "
                                "tell the records apart with `cell`")
            came_from[where] = path
        skipped += dropped
        results += found
    names = Names()  # the collective names this import takes (nccl-tests' own and a few others)
    logs = [(path, kept, description) for path, rows, description in logs
            if (kept := names.rows(rows, lambda row: row["op"]))]
    collectives = _collectives(engine, name, config, logs, results) if logs else []
    try:
        save_import(engine, name, [str(f) for f in files], results, collectives)
    except NotAnImportCampaign as exc:
        raise UsageError(f"campaign {exc.args[0]!r} was run by benchctl; import into a campaign of its own "
                         "(--campaign NAME)") from None
    except UnknownCell as exc:
        raise UsageError(f"campaign {name!r} has no cell {exc.args[0]!r}: import its result record first (or in "
                         "the same command), or name an existing cell with --config") from None
    into = sorted({r.campaign or name for r in results} | ({name} if collectives else set())) or [name]
    return ImportSummary(", ".join(into), len(results), skipped, len(collectives),
                         tuple(f"{path}: {description}" for path, _, description in logs), names.left_out.line())


def _collectives(engine: Engine, name: str, config: str | None, logs: list[tuple[Path, list[dict], str]],
                 results: list[CellResult]) -> list[CellCollectives]:
    """Each log's rows for the cell it measured (``_config_for``), a cell of campaign ``name``: one
    already stored or imported now, whose GPU count its ranks must match."""
    from benchctl.results.cell_evidence import largest_allreduce  # with the store's queries: for logs only

    counts = cell_counts(engine, name) | {r.key: r.count for r in results if (r.campaign or name) == name}
    collectives = []
    for path, rows, _ in logs:
        key = _config_for(list(counts), name, config, path)
        ranks = max((int(r["ranks"]) for r in rows if r.get("ranks")), default=None)
        if ranks is not None and key in counts and ranks != counts[key]:
            raise SpecError(str(path), None, "", f"this log ran on {ranks} ranks but the cell {key!r} has "
                            f"{counts[key]} GPUs; name the cell it measured with --config")
        collectives.append(CellCollectives(key=key, source=str(path), rows=rows, busbw=largest_allreduce(rows)))
    return collectives


def _nccl_rows(path: Path) -> tuple[list[dict], str]:
    """The log's rows and what they were read as."""
    from benchctl.results.nccl_log import (
        NcclLogError,
        failures,
        looks_like_nccl_log,
        read_as,
        read_log_text,
        read_nccl_log,
    )

    try:
        text = read_log_text(path)
        if not looks_like_nccl_log(text):
            raise SpecError(str(path), None, "", "neither a result-record file (.json, .yaml) nor an nccl-tests log "
                            "(no '#  size  count  type' header line)")
        rows = read_nccl_log(path, text)
        failed = failures(rows, text)
        if failed:  # a bandwidth measured while returning wrong data, or a run cut short, is no measurement
            raise SpecError(str(path), None, "", "; ".join(failed) + ": not imported; fix the node (or its NCCL "
                            "setup) and import the log of a clean run")
        return rows, read_as(rows, text)
    except NcclLogError as exc:
        raise SpecError(str(path), exc.line, "", exc.problem) from None


def _config_for(cells: list[str], campaign: str, config: str | None, path: Path) -> str:
    """The cell an nccl-tests log belongs to: ``config``, else the campaign's only cell (``cells``:
    the campaign's cells, stored or being imported)."""
    if config:
        return config
    if len(cells) == 1:
        return cells[0]
    raise UsageError(f"{path}: which configuration did this nccl-tests log measure? name its cell with --config "
                     f"KEY (campaign {campaign!r} has {len(cells)} cells; `benchctl leaderboard --campaign "
                     f"{campaign}` lists them)")
