"""The payload runs on a bare node: it may import only the standard library, torch, and itself."""

from __future__ import annotations

import ast
import sys

from tests.conftest import REPO

ALLOWED = set(sys.stdlib_module_names) | {"torch", "__future__"}


def _imports(path: str) -> set[str]:
    tree = ast.parse((REPO / path).read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_payload_imports_only_stdlib_torch_and_itself() -> None:
    files = sorted(str(p.relative_to(REPO)) for p in (REPO / "payload").rglob("*.py"))
    assert "payload/runner.py" in files and len(files) > 10
    offenders = {f: sorted(_imports(f) - ALLOWED) for f in files if _imports(f) - ALLOWED}
    assert offenders == {}


def test_the_check_catches_a_forbidden_import(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    bad = tmp_path / "payload" / "bad.py"
    bad.parent.mkdir()
    bad.write_text("import yaml\nfrom benchctl.campaign.spec import load_campaign\nfrom store import queries\n")
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    assert _imports("payload/bad.py") - ALLOWED == {"yaml", "benchctl", "store"}
