"""Node records on the controller's disk: written whole (a reader never sees half a record) and private."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_private(path: Path, text: str) -> None:
    """Replace ``path`` with ``text``: a new 0600 file renamed into place (a record may name a host, a key
    file or a provider's instance id, which are the user's alone)."""
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f"{path.name}.", suffix=".tmp")  # 0600, O_EXCL
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
