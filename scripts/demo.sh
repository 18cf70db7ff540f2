#!/usr/bin/env bash
# Quick start 1: set up, run the local campaign on this machine, print its leaderboard.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/benchctl run campaigns/local-smoke.yaml
