#!/usr/bin/env bash
# GPU check of the rotary and FP8 kernels (run from anywhere on the H200 host):
#   bash scripts/check_rotary_fp8.sh
# Builds the two modules (python -m tools.build_ext --only rotary --only fp8), compiles and runs
# the standalone tests (csrc/tests/rotary_test.cu, fp8_test.cu), runs the pytest files (GPU and
# CPU tests), times the kernels against their peers once, and prints a pass/fail table.
# Logs: build/check_rotary_fp8/<step>.log. Exit status: number of failed steps.
set -u
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
LOGS=build/check_rotary_fp8
mkdir -p "$LOGS"
NVCC_FLAGS=(-std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -Xptxas -v -I csrc/kernels)

names=()
results=()
step() {  # step NAME TIMEOUT_S CMD...
  local name=$1 limit=$2
  shift 2
  local start=$SECONDS
  timeout "$limit" "$@" >"$LOGS/$name.log" 2>&1
  local rc=$?
  names+=("$name")
  results+=("$([ $rc -eq 0 ] && echo PASS || echo "FAIL(rc=$rc)") $((SECONDS - start))s")
  return $rc
}

step build 300 "$PY" -m tools.build_ext --only rotary --only fp8
step nvcc_rotary_test 120 "$NVCC" "${NVCC_FLAGS[@]}" csrc/tests/rotary_test.cu -o "$LOGS/rotary_test" \
  && step rotary_test 60 "$LOGS/rotary_test"
step nvcc_fp8_test 180 "$NVCC" "${NVCC_FLAGS[@]}" csrc/tests/fp8_test.cu -o "$LOGS/fp8_test" \
  && step fp8_test 90 "$LOGS/fp8_test"
fp8_rc=$?
step pytest_rotary 120 "$PY" -m pytest -q --tb=line -p no:cacheprovider tests/test_rotary.py
# a hung GEMM (rc 124) would hang the GPU pytests too: then only their CPU part runs
if [ "${fp8_rc:-1}" -eq 124 ]; then
  step pytest_fp8_cpu_only 120 "$PY" -m pytest -q --tb=line -p no:cacheprovider -m "not gpu" tests/test_fp8.py
else
  step pytest_fp8 240 "$PY" -m pytest -q --tb=line -p no:cacheprovider tests/test_fp8.py
fi
step quick_timings 150 "$PY" - <<'EOF'
import torch
from kernels.harness.timing import time_cuda
from kernels.extension.rotary import apply_rotary_emb, apply_rotary_torch, rotary_tables
from kernels.extension.ops import fp8 as fp8_ops

q = torch.randn(8, 4096, 32, 128, device="cuda").to(torch.bfloat16)
k = torch.randn_like(q)
cos, sin = rotary_tables(4096, 128, device="cuda")
nbytes = 4 * q.numel() * 2
for name, fn in [("rotary kernel", lambda: apply_rotary_emb(q, k, cos, sin, backend="kernel")),
                 ("rotary kernel inplace", lambda: apply_rotary_emb(q, k, cos, sin, inplace=True, backend="kernel")),
                 ("rotary torch path", lambda: apply_rotary_torch(q, k, cos, sin)),
                 ("copy (clone q, k)", lambda: (q.clone(), k.clone()))]:
    ms = time_cuda(fn)["median"]
    print(f"{name:28s} [8,4096,32,128] q+k  {ms:8.3f} ms  {nbytes / ms / 1e9:6.3f} TB/s")
del q, k
for n in (4096, 8192):
    a = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn)
    s = torch.ones((), device="cuda")
    for name, fn in [("fp8_gemm auto", lambda: torch.ops.kernels.fp8_gemm(a, b, s, s)),
                     ("fp8_gemm persistent", lambda: torch.ops.kernels.fp8_gemm(a, b, s, s, persistent=1)),
                     ("fp8_gemm per-tile", lambda: torch.ops.kernels.fp8_gemm(a, b, s, s, persistent=0)),
                     ("fp8_gemm bn64", lambda: torch.ops.kernels.fp8_gemm(a, b, s, s, block_n=64)),
                     ("fp8_gemm bn256 fast_accum", lambda: torch.ops.kernels.fp8_gemm(a, b, s, s, path=0, block_n=256)),
                     ("torch._scaled_mm", lambda: torch._scaled_mm(a, b.t(), scale_a=s, scale_b=s, out_dtype=torch.bfloat16)),
                     ("torch._scaled_mm fast_accum", lambda: torch._scaled_mm(a, b.t(), scale_a=s, scale_b=s, out_dtype=torch.bfloat16, use_fast_accum=True))]:
        ms = time_cuda(fn)["median"]
        print(f"{name:28s} {n}^3  {ms:8.3f} ms  {2 * n**3 / ms / 1e9:7.1f} TFLOP/s")
    print("plan", n, fp8_ops.gemm_plan(n, n, n))
EOF

echo
echo "==== rotary / fp8 check ($(date -u +%FT%TZ), $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1))"
failed=0
for pass in FAIL PASS; do  # failed steps first
  for i in "${!names[@]}"; do
    case ${results[$i]} in "$pass"*) printf '%-20s %s\n' "${names[$i]}" "${results[$i]}" ;; esac
  done
done
for i in "${!names[@]}"; do
  case ${results[$i]} in FAIL*) failed=$((failed + 1)) ;; esac
done
# failing cases of the standalone tests and pytest first (with the detail line above each)
for f in rotary_test fp8_test; do
  [ -f "$LOGS/$f.log" ] || continue
  n_fail=$(grep -c '^FAIL' "$LOGS/$f.log")
  n_pass=$(grep -c '^PASS' "$LOGS/$f.log")
  echo "---- $f: $n_fail FAIL, $n_pass PASS"
  grep -B1 '^FAIL' "$LOGS/$f.log" | grep -v '^--$' | head -40
done
for f in pytest_rotary pytest_fp8 pytest_fp8_cpu_only; do
  [ -f "$LOGS/$f.log" ] || continue
  echo "---- $f: $(grep -E '[0-9]+ (passed|failed)' "$LOGS/$f.log" | tail -1)"
  grep -E '^(FAILED|ERROR)|Fatal Python error|Segmentation' "$LOGS/$f.log" | head -20
done
for i in "${!names[@]}"; do  # a failed step with no FAIL lines of its own: its log tail
  case ${results[$i]} in FAIL*)
    grep -qE '^(FAIL|FAILED)' "$LOGS/${names[$i]}.log" || { echo "---- ${names[$i]} (log tail)"; tail -25 "$LOGS/${names[$i]}.log"; } ;;
  esac
done
echo "---- ptxas (spills / registers of the rotary and fp8 kernels)"
grep -hE "spill stores|Used [0-9]+ registers" "$LOGS"/nvcc_*.log 2>/dev/null | sort | uniq -c | head -20
echo "---- fp8_test accuracy and large-problem lines"
grep -E 'acc_err|\^3' "$LOGS/fp8_test.log" 2>/dev/null | head -40
[ -f "$LOGS/quick_timings.log" ] && { echo "---- quick_timings"; grep -vE '^\s*$' "$LOGS/quick_timings.log" | tail -30; }
exit $failed
