"""benchctl on a pseudo-terminal, for the tests that read what a person sees: the one helper
``scripts/doc_samples.py`` uses to write the docs' samples, loaded from the script."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from tests.conftest import REPO


def doc_samples() -> ModuleType:
    """``scripts/doc_samples.py`` as a module (loaded once)."""
    if "doc_samples" in sys.modules:
        return sys.modules["doc_samples"]
    spec = importlib.util.spec_from_file_location("doc_samples", REPO / "scripts" / "doc_samples.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["doc_samples"] = module
    spec.loader.exec_module(module)
    return module


def on_terminal(home: Path, width: int, *args: str, stderr: bool = False) -> tuple[str, int]:
    """(what ``benchctl ARGS`` printed on a pseudo-terminal ``width`` columns wide, its exit code),
    escape sequences removed, no provider credentials in reach; stderr too when asked."""
    text, code = doc_samples().on_terminal(tuple(args), home, REPO, stderr=stderr, width=width)
    return str(text), int(code)
