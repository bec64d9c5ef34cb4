#!/usr/bin/env bash
# The GPU check of issue 32 in one device call (at most about 6 minutes): placement and the memory cap
# with fractional shares, CPU vs GPU client actors and the in-process GPU on a small and a large
# graph, ogbn-products-sized sampled work, a Tune grid on GPU. Its results land in one folder.
#
# On a lent GPU machine (see ../shared/device/README.md; carry .whl and .dev):
#   . ./.dev/env.sh && bash benchmarks/gpu_check.sh "$OUT/gpu-check"
# Anywhere else: bash benchmarks/gpu_check.sh /tmp/gpu-check   (reports the GPU steps as skipped)
# Record the folder's gpu_check.md in benchmarks/RESULTS.md (section gpu-check) whenever a machine is lent.
set -uo pipefail
out=${1:-gpu-check}
mkdir -p "$out"
export RAY_AUTH_MODE=disabled RAY_USAGE_STATS_ENABLED=0 PYTHONUNBUFFERED=1
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$out/nvidia-smi.csv"
timeout 350 python3 benchmarks/gpu_check.py --out "$out" --budget-s 320 2>&1 | tee "$out/log.txt"
status=${PIPESTATUS[0]}
rm -rf "$out/runs" "$out/tune"   # run folders: large, and the figures are in gpu_check.md/json
exit "$status"
