#!/usr/bin/env bash
# One call on a lent GPU machine (issue 28 items 6–8), every stage bounded so one failure leaves the rest:
#   1. the machine: nvidia-smi, topology, Python/torch/CUDA/Triton/NCCL versions, Flash-Attention present or not;
#   2. the whole path: scripts/gpu_e2e.py (benchctl run with the local provider on the GPU, two cells; the
#      second loads the first's compile cache), then status/leaderboard/logs/report;
#   3. the fidelity table: scripts/fidelity_vs_upstream.py against an upstream nanochat checkout
#      (UPSTREAM, default .device/nanochat), warm-ups side by side within 90 % of the GPU's memory.
# Needs the controller's Python dependencies as wheels in WHEELS (default .device/whl: the machine has no
# network; `bash scripts/device_prep.sh NANOCHAT_GIT_DIR` fetches them and the checkout). Results go to OUT:
# machine.txt, e2e.txt, e2e.tar.gz, fidelity.json, fidelity.txt, session.log.
#     OUT=/tmp/o BUDGET_S=540 bash scripts/gpu_session.sh
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu-session}; mkdir -p "$OUT"
BUDGET_S=${BUDGET_S:-540}; WHEELS=${WHEELS:-.device/whl}; UPSTREAM=${UPSTREAM:-.device/nanochat}
export PYTHONUNBUFFERED=1
start=$(date +%s)
left() { echo $(( BUDGET_S - ($(date +%s) - start) )); }
exec > >(tee "$OUT/session.log") 2>&1
echo "== $(date -u +%FT%TZ) commit $(cat .device/COMMIT 2>/dev/null || echo unknown)"  # the copy's .git may be stale
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$WHEELS"/*.whl \
    || { echo "wheels did not install"; exit 3; }
export PYTHONPATH=/tmp/site
{
    nvidia-smi; nvidia-smi topo -m; nproc; free -g
    python3 -c "import sys, torch, triton; print(sys.version); print('torch', torch.__version__, 'cuda', torch.version.cuda,
'triton', triton.__version__, 'nccl', torch.cuda.nccl.version(), torch.cuda.get_device_name(0),
'mem_gib', round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1))"
    for m in flash_attn_interface flash_attn kernels; do python3 -c "import $m" 2>/dev/null && echo "$m: yes" || echo "$m: no"; done
} > "$OUT/machine.txt" 2>&1
cat "$OUT/machine.txt" | tail -8
echo "== e2e ($(left) s left)"
timeout 270 python3 scripts/gpu_e2e.py --out /tmp/e2e --steps "${E2E_STEPS:-150}" --timeout-s 250 2>&1 | tee "$OUT/e2e.txt"
pkill -INT -f "payload run" 2>/dev/null; sleep 2; pkill -KILL -f "payload run" 2>/dev/null  # no node outlives its stage
tar --exclude='*.bin' --exclude=inductor --exclude=triton --exclude=node-a --exclude=node-b \
    -czf "$OUT/e2e.tar.gz" -C /tmp e2e 2>/dev/null  # the nodes' compile caches are GBs
ls -la /tmp/e2e/home/*/compile-cache 2>/dev/null | head
echo "== fidelity ($(left) s left)"
gib=$(python3 -c "import torch; print(int(0.9 * torch.cuda.get_device_properties(0).total_memory / 2**30))")
timeout $(( $(left) > 60 ? $(left) : 60 )) python3 scripts/fidelity_vs_upstream.py --upstream "$UPSTREAM" \
    --depth ${DEPTHS:-12 20} --precision bf16 fp8 --device-batch-size 16 --steps 30 --flex \
    --warm-gib "$gib" --budget-s $(( $(left) - 15 )) --out "$OUT/fidelity.json" 2>&1 | tee "$OUT/fidelity.txt"
echo "== done in $(( $(date +%s) - start )) s"
