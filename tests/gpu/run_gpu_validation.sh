#!/bin/bash
# One device call, from the repo root on the GPU machine: install jax_fa4 (CMake builds every CUDA
# source), then run the stages named in STAGES (default: all, in this order), each under its own
# timeout inside one overall budget (BUDGET seconds, default 540):
#   tests     pytest $PYTEST_PATHS (default: the backward and training GPU tests)
#   memory    benchmarks/long_seq_memory.py (seq 131072 fwd+bwd peak memory, jax_fa4 and XLA)
#   multigpu  benchmarks/multi_gpu.py on every GPU the machine has
#   train     examples/train_byte_lm.py --compare (jax_fa4 vs jax.nn, same weights and batches)
#   bench     benchmarks/bench_attention.py with $BENCH_ARGS
# $OUT gets summary.txt, logs.tgz and the JSON/PNG results (at most 8 files come back).
set -o pipefail
OUT=${OUT:-/tmp/gpu_out}
BUDGET=${BUDGET:-540}
STAGES=${STAGES:-"tests memory multigpu train bench"}
PYTEST_PATHS=${PYTEST_PATHS:-"tests/gpu/test_bwd_cuda.py tests/gpu/test_training_cuda.py"}
LOGS=/tmp/gpu_logs
mkdir -p "$OUT" "$LOGS"
T0=$SECONDS
stamp() { echo "[$((SECONDS - T0))s] $*" | tee -a "$OUT/summary.txt"; }
left() { echo $((BUDGET - (SECONDS - T0))); }
# timeout for a stage: its own cap, or what is left of the budget minus a reserve for later stages
cap() { local l=$(($(left) - $2)); [ "$l" -lt "$1" ] && echo "$l" || echo "$1"; }
has() { [[ " $STAGES " == *" $1 "* ]]; }
finish() {
  tar czf "$OUT/logs.tgz" -C "$LOGS" . 2>/dev/null
  stamp "done"
}
trap finish EXIT

export JAX_FA4_ENABLE_CUDA=ON XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
export CMAKE_BUILD_PARALLEL_LEVEL=16
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site
fi

stamp "pip install"
if ! python3 -m pip install --no-build-isolation -q . > "$LOGS/install.txt" 2>&1; then
  stamp "INSTALL FAILED"; tail -40 "$LOGS/install.txt"; exit 1
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$OUT/summary.txt"

if has tests; then
  stamp "pytest $PYTEST_PATHS"
  # No autotuning while testing (never while timing): the tests compile hundreds of small programs
  # (125 backward tests: 84 s without, over 240 s with).
  XLA_FLAGS="${XLA_FLAGS:-} --xla_gpu_autotune_level=0" FA4_WORST_RATIO_FILE=$LOGS/worst_ratio.txt timeout "$(cap ${PYTEST_CAP:-240} 200)" \
    pytest -v -n ${PYTEST_WORKERS:-8} -p no:cacheprovider --tb=short -W ignore $PYTEST_PATHS > "$LOGS/pytest.txt" 2>&1
  stamp "pytest rc=$?"
  grep -E "passed|failed|error" "$LOGS/pytest.txt" | tail -3 | tee -a "$OUT/summary.txt"
  grep -E "^(FAILED|ERROR)|^E  " "$LOGS/pytest.txt" | head -30 | tee -a "$OUT/summary.txt"
  cat "$LOGS/worst_ratio.txt" 2>/dev/null | tee -a "$OUT/summary.txt"
fi

if has memory && [ "$(left)" -gt 100 ]; then
  stamp "long-sequence memory"
  timeout "$(cap 120 60)" python3 benchmarks/long_seq_memory.py --json "$OUT/long_seq_memory.json" \
    > "$LOGS/memory.txt" 2>&1
  stamp "memory rc=$?"; tail -4 "$LOGS/memory.txt" | tee -a "$OUT/summary.txt"
fi

if has multigpu && [ "$(left)" -gt 80 ]; then
  stamp "multi-GPU script"
  timeout "$(cap 120 60)" python3 benchmarks/multi_gpu.py --json "$OUT/multi_gpu.json" > "$LOGS/multi_gpu.txt" 2>&1
  stamp "multi_gpu rc=$?"; tail -25 "$LOGS/multi_gpu.txt" | tee -a "$OUT/summary.txt"
fi

if has train && [ "$(left)" -gt 80 ]; then
  stamp "training example --compare ${TRAIN_ARGS:-}"
  timeout "$(cap 200 30)" python3 examples/train_byte_lm.py --compare --no-progress --out /tmp/byte_lm \
    ${TRAIN_ARGS:-} > "$LOGS/train.txt" 2>&1
  stamp "train rc=$?"; tail -12 "$LOGS/train.txt" | tee -a "$OUT/summary.txt"
  cp /tmp/byte_lm/compare.json /tmp/byte_lm/compare.png "$OUT/" 2>/dev/null
fi

if has bench && [ "$(left)" -gt 60 ]; then
  stamp "benchmark ${BENCH_ARGS:-}"
  timeout "$(cap 400 5)" python3 benchmarks/bench_attention.py ${BENCH_ARGS:-} --max-seconds $(($(left) - 30)) \
    --out "$OUT/bench.json" > "$LOGS/bench.txt" 2>&1
  stamp "benchmark rc=$?"; tail -45 "$LOGS/bench.txt" | tee -a "$OUT/summary.txt"
fi
