#!/bin/bash
# One device call, from the repo root on the GPU machine: the Hopper backward end to end.
#   1. builds the standalone check (tests/gpu/cuda/bwd_kernel_check.cu) while jax_fa4 installs in
#      the background (pip, CMake builds every CUDA source);
#   2. runs the standalone check (random data vs a float64 CPU backward, outputs and workspace
#      poisoned; every case in the default and the deterministic mode) and its kernel-only
#      timings on FA3-grid cells, default and deterministic side by side (the host-side layout
#      model, tests/gpu/cuda/bwd_layout_check.py, needs no GPU and is not repeated here);
#   3. runs tests/gpu/test_bwd_cuda.py (jax.grad through the kernel vs the float64 oracle);
#   4. times jax_fa4's backward (default and deterministic=True) beside cuDNN on FA3-grid cells
#      (benchmarks/bench_attention.py).
# Every stage has its own timeout inside one overall budget (BUDGET seconds, default 470) so the
# whole call ends within 8 minutes; a hang in the kernel ends the run after the standalone check.
# Logs go to $OUT (default /tmp/bwd_out); summary.txt has the timeline and the verdicts.
set -o pipefail
OUT=${OUT:-/tmp/bwd_out}
BUDGET=${BUDGET:-470}
mkdir -p "$OUT" build/bwd_check
T0=$SECONDS
stamp() { echo "[$((SECONDS - T0))s] $*" | tee -a "$OUT/summary.txt"; }
left() { echo $((BUDGET - (SECONDS - T0))); }
# timeout of a stage: its own cap, or what is left of the budget minus a reserve for the rest
cap() { local l=$(($(left) - $2)); [ "$l" -lt "$1" ] && echo "$l" || echo "$1"; }

export JAX_FA4_ENABLE_CUDA=ON XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
export CMAKE_BUILD_PARALLEL_LEVEL=8

stamp "pip install (background) and standalone build"
(python3 -m pip install --no-build-isolation -q . > "$OUT/install.txt" 2>&1; echo $? > "$OUT/install.rc") &
PIP_PID=$!

NVCC_FLAGS="-std=c++17 -O2 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -lineinfo -Icuda"
SRCS="cuda/hopper/bwd_hd64.cu cuda/hopper/bwd_hd128.cu cuda/hopper/bwd_hd256.cu cuda/hopper/bwd_launch.cu
      cuda/hopper/tensor_map.cu tests/gpu/cuda/bwd_variants_hd64.cu tests/gpu/cuda/bwd_variants_hd128.cu
      tests/gpu/cuda/bwd_variants_hd256.cu tests/gpu/cuda/bwd_kernel_check.cu"
for f in $SRCS; do
  n=$(basename "$f" .cu)
  nvcc $NVCC_FLAGS -Xcompiler -fopenmp -Xptxas -v -c "$f" -o build/bwd_check/$n.o > build/bwd_check/$n.log 2>&1 &
done
for job in $(jobs -p); do [ "$job" != "$PIP_PID" ] && wait "$job"; done
grep -hE "error|Compiling entry|Used|spill|C75" build/bwd_check/*.log | sed 's/ptxas info    : //' > "$OUT/ptxas_bwd.txt"
if ! nvcc $NVCC_FLAGS -Xcompiler -fopenmp build/bwd_check/*.o -o build/bwd_check/bwd_check > "$OUT/link.txt" 2>&1; then
  stamp "BUILD FAILED"; grep -h -B2 -A5 error build/bwd_check/*.log "$OUT/link.txt" | head -60; exit 1
fi
{
  echo "spill lines with nonzero bytes: $(grep -cE '[1-9][0-9]* bytes spill' "$OUT/ptxas_bwd.txt")"
  for d in 64 128 256; do
    cuobjdump --dump-sass build/bwd_check/bwd_hd$d.o > build/bwd_check/bwd_hd$d.sass 2>/dev/null
    echo "hd$d: HGMMA $(grep -c HGMMA build/bwd_check/bwd_hd$d.sass), LDL/STL $(grep -cE 'LDL|STL' build/bwd_check/bwd_hd$d.sass), RED $(grep -cE 'RED' build/bwd_check/bwd_hd$d.sass), UBLKCP/UTMALDG $(grep -cE 'UBLKCP|UTMALDG' build/bwd_check/bwd_hd$d.sass)"
  done
  grep -m4 -oE 'HGMMA\.[^ ]*' build/bwd_check/bwd_hd128.sass | sort | uniq -c
} > "$OUT/sass_facts.txt" 2>&1
cat "$OUT/sass_facts.txt"

stamp "standalone check + kernel-only timings"
OMP_NUM_THREADS=8 timeout "$(cap 170 200)" build/bwd_check/bwd_check --variants ${CHECK_VARIANTS:-0,3} \
  --deterministic-bench --seqs ${BENCH_SEQS:-2048,16384} > "$OUT/bwd_check.txt" 2>&1
CHECK_RC=$?
grep -E "^FAIL|cases passed|TFLOP|^ +(64|128|256) " "$OUT/bwd_check.txt" | head -80
grep -c "DIFFERS ON RERUN (deterministic mode)" "$OUT/bwd_check.txt" | sed 's/^/deterministic-mode dq reruns that differed: /'
stamp "standalone check rc=$CHECK_RC (0 pass, 1 numerical failures, 2 CUDA error, 124 timeout = hang?)"
if [ "$CHECK_RC" = 124 ] || [ "$CHECK_RC" = 2 ]; then
  stamp "stopping: the kernel hung or faulted; see bwd_check.txt"; kill "$PIP_PID" 2>/dev/null; exit 1
fi

stamp "waiting for pip install"
while [ ! -f "$OUT/install.rc" ] && [ "$(left)" -gt 150 ]; do sleep 2; done
if [ "$(cat "$OUT/install.rc" 2>/dev/null)" != 0 ]; then
  stamp "INSTALL FAILED or not done in time"; tail -40 "$OUT/install.txt"; exit 1
fi
grep -hE "spill" build/*/CMakeFiles/*.dir/cuda/hopper/bwd_*.log 2>/dev/null | sort | uniq -c | head -3

PYTEST_PATHS=${PYTEST_PATHS:-tests/gpu/test_bwd_cuda.py}
stamp "pytest $PYTEST_PATHS"
XLA_FLAGS="${XLA_FLAGS:-} --xla_gpu_autotune_level=0" FA4_WORST_RATIO_FILE=$OUT/worst_ratio.txt timeout "$(cap 170 100)" \
  pytest -q -n 8 -p no:cacheprovider $PYTEST_PATHS > "$OUT/pytest_bwd.txt" 2>&1
stamp "pytest rc=$?"
tail -25 "$OUT/pytest_bwd.txt"

if [ "$CHECK_RC" = 0 ] && [ "$(left)" -gt 60 ] && [ -z "${SKIP_JAX_BENCH:-}" ]; then
  stamp "benchmark: backward beside cuDNN"
  timeout "$(cap 150 5)" python3 benchmarks/bench_attention.py --impls jax_fa4,jax_fa4_det,cudnn --head-dims 64,128,256 \
    --seqs 2k,16k --no-matmul --max-seconds $(($(left) - 40)) --cell-timeout 60 \
    --out "$OUT/bench_bwd.json" > "$OUT/bench_bwd.txt" 2>&1
  stamp "benchmark rc=$?"
  tail -40 "$OUT/bench_bwd.txt"
fi
stamp "done"
