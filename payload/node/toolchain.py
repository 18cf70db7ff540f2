"""Can this node run ``torch.compile`` on GPU? The toolchain Triton needs, found as Triton finds it (stdlib only).

On GPU, Inductor emits Triton kernels, and Triton builds a C launcher for them (and its CUDA
utilities module, once) with the host C compiler against Python's headers, at the first compiled
step (triton-lang/triton ``python/triton/runtime/build.py`` ``_build``/``_find_compiler`` and
``third_party/nvidia/backend/driver.py``). So the node needs:

- a C compiler: ``CC`` when it is set (used as the command, as is), else ``gcc``, else ``clang`` on
  the ``PATH``; none raises "Failed to find C compiler. Please specify via CC environment variable";
- ``Python.h`` in the interpreter's include directory, ``sysconfig.get_paths(scheme)["include"]``
  of the default scheme (Debian's ``posix_local`` read as ``posix_prefix``, as Triton reads it).

Both are looked up in the environment the profile's ranks get (the runner's, then the job's
``env``), in well under a second: no compilation is run. PyTorch's ``-runtime`` images have no
compiler (pytorch/pytorch issue 116696: the release Dockerfile installs gcc in the runtime stage
only when ``TRITON_VERSION`` is passed, which final releases did not until PR 170235, Dec 2025).

``toolchain.json`` (preflight's facts): ``{"compile": <the profile compiles here>, "cc": <path or
null>, "cc_from": <what was looked for>, "python_include": <dir>, "python_h": <found>}``.
"""

from __future__ import annotations

import json
import os
import shutil
import sysconfig
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..job import Job

FILE = "toolchain.json"


def python_include() -> str:
    """The directory Triton passes as ``-I`` for ``Python.h``."""
    scheme = sysconfig.get_default_scheme()
    if scheme == "posix_local":
        scheme = "posix_prefix"
    return sysconfig.get_paths(scheme=scheme)["include"]


def c_compiler(env: Mapping[str, str]) -> tuple[str | None, str]:
    """(the compiler's path or None, what was looked for) under ``env``'s ``CC`` and ``PATH``."""
    path = env.get("PATH", os.defpath)
    if "CC" in env:  # Triton runs CC as one command word, even when it is empty or has arguments
        return (shutil.which(env["CC"], path=path) if env["CC"] else None), f"CC={env['CC']}"
    for name in ("gcc", "clang"):
        found = shutil.which(name, path=path)
        if found:
            return found, name
    return None, "gcc or clang on the PATH (CC unset)"


def toolchain(env: Mapping[str, str], compile_wanted: bool) -> dict[str, Any]:
    """The facts (see the module doc) for ``env``; ``compile_wanted``: the profile would compile here."""
    cc, looked_for = c_compiler(env)
    include = python_include()
    return {"compile": compile_wanted, "cc": cc, "cc_from": looked_for, "python_include": include,
            "python_h": (Path(include) / "Python.h").is_file()}


def blockers(facts: Mapping[str, Any]) -> list[str]:
    """What stops Triton from building its launchers, one phrase each (empty: nothing)."""
    found = []
    if not facts.get("cc"):
        found.append(f"no C compiler (looked for {facts.get('cc_from')})")
    if not facts.get("python_h"):
        found.append(f"no Python.h in {facts.get('python_include')} (the Python development headers)")
    return found


def write(directory: Path, env: Mapping[str, str], compile_wanted: bool) -> None:
    (directory / FILE).write_text(json.dumps(toolchain(env, compile_wanted), indent=2))


FIX = ("use an image with gcc and the Python headers (a -devel image; the providers' default images have "
       "them), or set profile.compile: false to measure eager on purpose")


def compile_wanted(job: Job) -> bool:
    """The job's profile would ``torch.compile`` (on GPU, ``compile`` on, the profile still to run)."""
    return (job.profile is not None and job.profile.compile and job.gpu.lower() != "cpu"
            and "profile" in job.pending_phases())
