#!/usr/bin/env bash
# Quick start 2 (and CI): set up, lint, type-check, run the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# The SSH tests run a real sshd on 127.0.0.1.
if [ ! -x /usr/sbin/sshd ]; then
    if [ "$(id -u)" = 0 ]; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssh-server >/dev/null
    else
        echo "scripts/test.sh: the SSH tests need /usr/sbin/sshd: install openssh-server" >&2
        exit 2
    fi
fi
# The report tests render the HTML report in headless Chromium (Debian's package).
if [ ! -x /usr/bin/chromium ]; then
    if [ "$(id -u)" = 0 ]; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
    else
        echo "scripts/test.sh: the report tests need /usr/bin/chromium: install Debian's chromium" >&2
        exit 2
    fi
fi
.venv/bin/ruff check .
.venv/bin/mypy
.venv/bin/lint-imports --no-cache
# Four workers on this machine's 2 cores: the end-to-end tests spend a quarter of their time waiting
# (polls, sleeps, sshd, stand-in steps), which two workers leave idle (docs/measurements/).
# The whole suite runs here; `scripts/test.sh -m "not slow"` is the fast tier (no end-to-end runs).
# The suite starts hundreds of Python processes: let them reuse compiled modules (__pycache__, which
# git ignores) even where the environment turns the cache off.
unset PYTHONDONTWRITEBYTECODE
.venv/bin/python -m pytest -q -n 4 --durations=15 "$@"
