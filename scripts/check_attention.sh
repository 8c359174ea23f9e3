#!/usr/bin/env bash
# GPU check of the production attention kernels (run on the H200 from the repo root):
#   bash scripts/check_attention.sh
# 1. builds the extension (python -m tools.build_ext), 2. builds + runs the standalone csrc
# tests (CPU reference, correctness table, timings), 3. runs the gpu pytests, 4. prints a
# summary table. Every step runs even if an earlier one failed; the exit code is non-zero
# if any step failed. Logs: build/check_attention/*.log
set -u
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
LOG=build/check_attention
mkdir -p "$LOG"
declare -a NAMES STATUS

step() {  # step <name> <command...>
    local name=$1; shift
    echo "=== $name: $*"
    local t0=$SECONDS
    "$@" > "$LOG/$name.log" 2>&1
    local rc=$?
    tail -n 60 "$LOG/$name.log"
    NAMES+=("$name"); STATUS+=("rc=$rc $((SECONDS - t0))s")
    return $rc
}

NVCC="nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -I csrc/kernels"
LAUNCHERS="csrc/kernels/attention/attn_decode.cu csrc/kernels/attention/attn_prefill.cu"

nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
step build_ext "$PY" -m tools.build_ext
step build_attn_test $NVCC csrc/tests/attn_test.cu $LAUNCHERS -o build/attn_test
step build_attn_paged_test $NVCC csrc/tests/attn_paged_test.cu $LAUNCHERS -o build/attn_paged_test
step attn_test ./build/attn_test
step attn_paged_test ./build/attn_paged_test
# No -x: every failure is listed. A per-test timeout (pytest-timeout, when installed) turns
# a hang into one failure. The bad-input test runs in its own process so that a crash there
# (it must raise, never crash) cannot hide the results of the other tests, and vice versa.
TIMEOUT_ARGS=()
"$PY" -c "import pytest_timeout" 2>/dev/null && TIMEOUT_ARGS=(--timeout=180)
export COLUMNS=250  # -rf lines keep their error message
step pytest_gpu "$PY" -m pytest -m gpu -q -p no:cacheprovider -o addopts="" "${TIMEOUT_ARGS[@]}" \
    tests/test_attention_gpu.py -k "not bad_inputs" -rf
step pytest_gpu_bad_inputs "$PY" -m pytest -m gpu -q -p no:cacheprovider -o addopts="" "${TIMEOUT_ARGS[@]}" \
    tests/test_attention_gpu.py -k "bad_inputs" -rf
step pytest_cpu "$PY" -m pytest -q -p no:cacheprovider tests/test_attention_backend.py tests/test_attention_reference.py

echo
echo "==================== summary ===================="
grep -hE "PASS|FAIL" "$LOG/attn_test.log" "$LOG/attn_paged_test.log" 2>/dev/null | \
    awk '{printf "  %s\n", $0}' | cut -c1-160
echo "-------------------------------------------------"
# Compact table of gpu pytest failures: test function, failed parametrizations, first reason.
cat "$LOG/pytest_gpu.log" "$LOG/pytest_gpu_bad_inputs.log" 2>/dev/null | "$PY" -c '
import re, sys
fails = {}
for line in sys.stdin:
    m = re.match(r"FAILED \S+::(\w+)(\[[^\]]*\])?(?: - (.*))?", line.strip())
    if m:
        fails.setdefault(m.group(1), []).append((m.group(2) or "", (m.group(3) or "").strip()))
if not fails:
    print("  gpu pytest: no FAILED lines (see the pytest logs for crashes / errors)")
for name, items in fails.items():
    print(f"  FAILED {name}: {len(items)}  e.g. {items[0][0]} {items[0][1][:110]}")
    for params, why in items[1:6]:
        print(f"         {params} {why[:110]}")
    if len(items) > 6:
        print(f"         ... {len(items) - 6} more")
'
grep -hE "Fatal Python error|Segmentation fault|Timeout" "$LOG/pytest_gpu.log" "$LOG/pytest_gpu_bad_inputs.log" 2>/dev/null | head -5
echo "-------------------------------------------------"
rc=0
for i in "${!NAMES[@]}"; do
    printf "  %-24s %s\n" "${NAMES[$i]}" "${STATUS[$i]}"
    [[ "${STATUS[$i]}" == rc=0* ]] || rc=1
done
exit $rc
