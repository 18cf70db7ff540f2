"""Node records on the controller's disk: written whole (a reader never sees half a record) and private."""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from pathlib import Path

_PLAIN_FILE_NAME = re.compile(r"[A-Za-z0-9._:@-]{1,200}")


def file_name(label: str) -> str:
    """The one file name of ``label`` (a node token, a machine's name) in a folder of records: the label
    itself when it is a plain name (1-200 letters, digits and ``. _ - : @``, not ``.`` or ``..``: every
    token benchctl makes, ``bc-<16 hex>`` and its members' ``-n<i>``, and every ssh node name or
    ``host:port``), else ``+``, the label with every other character as ``_`` (at most 64 of them), ``+``
    and 16 hex digits of its SHA-256: no ``/``, never ``.`` or ``..``, a name no plain label has, and no
    ``%``, ``$`` or ``~`` (ssh expands those in ``UserKnownHostsFile``). A label read back from a store or
    a file therefore never names a path outside its folder, whatever it holds."""
    if _PLAIN_FILE_NAME.fullmatch(label) and label not in (".", ".."):
        return label
    readable = re.sub(r"[^A-Za-z0-9._:@-]", "_", label)[:64]
    digest = hashlib.sha256(label.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"+{readable}+{digest}"


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
