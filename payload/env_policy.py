"""The one rule for environment variables: which names hold secrets, how captured values are
redacted, and what a local node's processes inherit (stdlib only: it ships to nodes).

- ``secret_name``: names with KEY, TOKEN, SECRET, PASSWORD, PASSWD, CREDENTIAL, COOKIE, WEBHOOK,
  an ``AUTH``, ``OAUTH``, ``DSN``, ``PAT`` or ``PASS`` word, ``PGPASS``, a ``*_PWD`` (not ``PWD``),
  DATABASE_URL, ``BENCHCTL_DB`` (a database URL may carry a password)
  and every proxy variable (proxy URLs carry user-info). Campaign ``env`` refuses them (``benchctl.spec``),
  ``facts/env.txt`` shows ``<redacted>`` for them, local nodes never get them.
- ``redact_value``: the user-info of every URL in a value becomes ``***`` (the host stays).
- ``node_environment``: the allow-list a local node's processes start from (``NODE_NAMES`` and
  ``NODE_PREFIXES``), minus secret names. A controller's credentials, database URL and proxies
  stay on the controller.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|COOKIE|WEBHOOK|(^|_)O?AUTH($|_)"
                         r"|(^|_)DSN($|_)|(^|_)PAT($|_)|(^|_)PASS($|_)|PGPASS|._PWD$"
                         r"|DATABASE_URL|PROXY|^BENCHCTL_DB$", re.IGNORECASE)
"""``SECRET_NAME.search(name)``: the name looks like it holds a secret."""

NODE_NAMES = frozenset({"PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TMPDIR", "TERM",
                        "LD_LIBRARY_PATH", "CC", "CXX", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                        "BENCHCTL_FAULTS", "BENCHCTL_LOCAL_NODE"})
"""Variables a local node inherits by name: where programs and libraries are, locale, time zone,
temporary files, thread counts, and the two ``BENCHCTL_`` variables the payload reads on a local
node (the provider sets both itself)."""
NODE_PREFIXES = ("LC_", "CUDA_", "NCCL_", "NVIDIA_", "OMP_", "GLOO_", "PYTHON", "TORCH", "TRITON_")
"""Families a local node inherits: GPU and collective-library settings, Python and PyTorch ones."""

_USER_INFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)[^/\s]*@")
REDACTED = "<redacted>"


def secret_name(name: str) -> bool:
    """``name`` looks like it holds a secret (see the module docstring)."""
    return SECRET_NAME.search(name) is not None


def redact_value(value: str) -> str:
    """``value`` with the user-info of every URL in it replaced: ``postgresql://u:pw@db/x`` →
    ``postgresql://***@db/x``."""
    return _USER_INFO.sub(lambda m: m.group("scheme") + "***@", value)


def redacted(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` fit to write down: secret names' values ``<redacted>``, URL user-info elsewhere ``***``."""
    return {name: REDACTED if secret_name(name) else redact_value(value) for name, value in env.items()}


def node_environment(env: Mapping[str, str]) -> dict[str, str]:
    """What a local node's processes inherit from ``env`` (the controller's): the allow-listed
    names, never a secret one."""
    return {name: value for name, value in env.items()
            if (name in NODE_NAMES or name.startswith(NODE_PREFIXES)) and not secret_name(name)}
