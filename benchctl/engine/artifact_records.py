"""An attempt's artifact rows, from the ``artifact`` events its node wrote.

The node's events are evidence, not truth. Contract:

- one row per distinct ``path`` the events name (the first event's ``name``): 300 events naming
  one file are one row, and the file is read once;
- a path that is not a regular file inside the attempt's local directory (absent, a link out, a
  directory) is a row with no local path, size or hash;
- the hashes are computed by ``artifact_rows``, which the attempt driver calls only once the node
  is terminated (hashing bills nothing then); what is read is at most what came home, itself
  capped by ``max_artifact_gb``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from benchctl.store.models import Artifact, Event

BLOCK = 1 << 20


@dataclass(frozen=True)
class Announced:
    """One artifact the node announced: its name and its path relative to the attempt directory."""

    name: str
    path: str


def announced(events: Iterable[Event], attempt_id: int) -> list[Announced]:
    """The attempt's ``artifact`` events, one per distinct path, in the order first named."""
    seen: dict[str, Announced] = {}
    for event in events:
        if event.attempt_id != attempt_id or event.kind != "artifact":
            continue
        data = json.loads(event.data_json)
        path, name = data.get("path"), data.get("name")
        if isinstance(path, str) and path not in seen:
            seen[path] = Announced(name=str(name), path=path)
    return list(seen.values())


def artifact_rows(artifacts: list[Announced], attempt_id: int, cell_id: int, remote_dir: str,
                  local: Path) -> list[Artifact]:
    """The rows of ``artifacts`` (already distinct), each file under ``local`` hashed once."""
    rows = []
    for item in artifacts:
        path = local / item.path
        here = _inside(path, local)
        rows.append(Artifact(attempt_id=attempt_id, cell_id=cell_id, name=item.name,
                             remote_path=f"{remote_dir}/{item.path}", local_path=str(path) if here else None,
                             bytes=path.stat().st_size if here else None, sha256=sha256_of(path) if here else None))
    return rows


def _inside(path: Path, directory: Path) -> bool:
    """``path`` is a regular file inside ``directory`` (never an error: the name is the node's)."""
    try:
        return path.is_file() and path.resolve().is_relative_to(directory.resolve())
    except (OSError, ValueError, RuntimeError):
        return False


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(BLOCK), b""):
            digest.update(block)
    return digest.hexdigest()
