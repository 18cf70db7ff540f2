"""What is installed lives under one name, ``benchctl``: nothing generic (``store``, ``payload``,
``provisioners``) lands at the top of a user's site-packages, and the installed code imports only
installed names."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.conftest import REPO


@pytest.mark.slow
def test_the_wheel_holds_one_top_level_package_that_imports_from_itself(tmp_path: Path) -> None:
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", str(REPO),
                    "-w", str(tmp_path / "wheel")], check=True, capture_output=True, timeout=300)
    (wheel,) = (tmp_path / "wheel").glob("benchctl-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        top_level = archive.read(next(n for n in names if n.endswith("top_level.txt"))).decode().split()
        archive.extractall(tmp_path / "site")
    assert top_level == ["benchctl"]
    assert {n.split("/")[0] for n in names} == {"benchctl", wheel.name.split("-py")[0] + ".dist-info"}
    for module in ("payload/runner.py", "store/queries.py", "provisioners/aws/provider.py", "engine/cell_runner.py"):
        assert f"benchctl/{module}" in names, module
    # Outside the repository (no top-level store/payload/provisioners to fall back on), every module imports.
    code = ("import importlib, pkgutil, benchctl\n"
            "skip = ('benchctl.__main__',)\n"
            "for m in pkgutil.walk_packages(benchctl.__path__, 'benchctl.'):\n"
            "    if m.name not in skip and not m.name.endswith('__main__'):\n"
            "        importlib.import_module(m.name)\n"
            "import sys\n"
            "print(sorted(k for k in sys.modules if k.split('.')[0] in ('store', 'payload', 'provisioners')))")
    proc = subprocess.run([sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(tmp_path / 'site')!r})\n"
                           + code], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "[]", "no module was imported under a top-level name"
