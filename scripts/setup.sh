#!/usr/bin/env bash
# Create .venv and install benchctl with its test tools. torch==2.13.0 goes first so that nothing
# pulls a CUDA build of torch (a CPU build is on this kind of machine's disk). constraints.txt pins
# every other package to the tested versions: pip installs them without a resolver search (a
# current pip left to itself backtracks through the providers' SDK pins and gives up).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install --quiet --disable-pip-version-check torch==2.13.0
.venv/bin/python -m pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[dev]'
