"""constraints.txt, the lock the README's commands install with (scripts/setup.sh): it pins every
package pyproject.toml names, at versions its specifiers allow, and it is the set this venv runs."""

from __future__ import annotations

import re
import sysconfig
from importlib import metadata

import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from tests.conftest import REPO


def pins() -> dict[str, Version]:
    found: dict[str, Version] = {}
    for line in (REPO / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        match = re.fullmatch(r"([A-Za-z0-9._-]+)==(\S+)", line)
        assert match, f"constraints.txt: not a name==version pin: {line!r}"
        name = canonicalize_name(match[1])
        assert name not in found, f"constraints.txt pins {name} twice"
        found[name] = Version(match[2])
    return found


def declared() -> list[Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    requirements = [Requirement(r) for r in project["dependencies"]]
    for extra in project["optional-dependencies"].values():
        requirements += [Requirement(r) for r in extra]
    return [r for r in requirements if canonicalize_name(r.name) != "benchctl"]


def test_every_declared_package_is_pinned_within_its_specifier() -> None:
    locked = pins()
    for requirement in declared():
        name = canonicalize_name(requirement.name)
        assert name in locked, \
            f"{name} ({requirement}) has no pin in constraints.txt: regenerate it (see docs/quickstart.md)"
        assert requirement.specifier.contains(locked[name], prereleases=True), \
            f"constraints.txt pins {name}=={locked[name]}, outside pyproject.toml's {requirement}"


def test_the_pins_are_the_versions_this_venv_runs() -> None:
    # Only the venv's own site-packages: a package's vendored copies (setuptools/_vendor puts an older
    # tomli on sys.path once setuptools is imported) are not what pip installed.
    site = sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})
    installed = {canonicalize_name(d.metadata["Name"]): Version(d.version) for d in metadata.distributions(path=site)}
    missing = [r.name for r in declared() if canonicalize_name(r.name) not in installed]
    assert missing == [], "the venv lacks declared packages: run scripts/setup.sh"
    # A pin of a package this venv does not hold (one a later dev tool needs) is allowed; a different version is not.
    stale = {name: (str(version), str(installed[name])) for name, version in pins().items()
             if name in installed and installed[name].public != version.public}
    assert stale == {}, "constraints.txt differs from the tested venv (pin, installed): regenerate or reinstall"


def test_setup_installs_with_the_lock() -> None:
    setup = (REPO / "scripts" / "setup.sh").read_text()
    assert "-c constraints.txt -e '.[dev]'" in setup
