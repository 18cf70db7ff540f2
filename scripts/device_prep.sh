#!/usr/bin/env bash
# Prepare .device/ (git-ignored here) for a lent GPU machine, which has no network: the controller's
# Python dependencies as CPython 3.12 manylinux wheels at the versions constraints.txt pins (the machine's
# python3 is 3.12 with torch, click, PyYAML, matplotlib; pydantic, SQLAlchemy and the rest travel), an
# upstream nanochat checkout (its nanochat/ package, base_train.py, pyproject) from a git dir, and this
# commit's id. Then `run` a device call with carry [".device"] and `bash scripts/gpu_session.sh`
# (docs/measurements/2026-11-26-gpu-h100.md).
#     bash scripts/device_prep.sh /path/to/nanochat/.git [COMMIT (default 92d63d4)]
set -euo pipefail
cd "$(dirname "$0")/.."
NANOCHAT_GIT=${1:?give the git dir of a karpathy/nanochat clone}
UPSTREAM_COMMIT=${2:-92d63d4}
exclude=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$exclude")"
grep -qx '/.device/' "$exclude" 2>/dev/null || echo '/.device/' >> "$exclude"
rm -rf .device/whl .device/nanochat && mkdir -p .device/whl .device/nanochat
for name in alembic annotated-types click Mako pydantic pydantic_core rich SQLAlchemy sqlmodel tenacity \
            typing-inspection greenlet typing_extensions; do
    pin=$(grep -i "^${name}==" constraints.txt) || { echo "no pin for $name in constraints.txt" >&2; exit 2; }
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 -d .device/whl "$pin"
done
git --git-dir="$NANOCHAT_GIT" archive "$UPSTREAM_COMMIT" nanochat scripts/base_train.py pyproject.toml \
    | tar -x -C .device/nanochat
git --git-dir="$NANOCHAT_GIT" rev-parse "$UPSTREAM_COMMIT" > .device/nanochat/COMMIT
git rev-parse --short HEAD > .device/COMMIT
du -sh .device/whl .device/nanochat
