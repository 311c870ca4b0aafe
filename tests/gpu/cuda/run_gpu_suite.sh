#!/bin/bash
# One device call: install jax_fa4 with its CUDA kernels, run tests/gpu, then (optionally) the
# side-by-side forward benchmark. Logs and JSON go to $OUT.
set -o pipefail
OUT=${OUT:-/tmp/fwd_out}
mkdir -p "$OUT"
export JAX_FA4_ENABLE_CUDA=ON XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
python3 -m pip install --no-build-isolation -q . > "$OUT/install.txt" 2>&1 || { tail -50 "$OUT/install.txt"; exit 1; }
grep -hE "Used|spill" build/*/CMakeFiles/*.dir/cuda/hopper/*.log 2>/dev/null | head -2
cd /tmp && python3 -c "import jax_fa4._ffi as f; print('built with CUDA:', f.built_with_cuda())" && cd - >/dev/null
FA4_WORST_RATIO_FILE=$OUT/worst_ratio.txt timeout 240 pytest -q -n 4 -p no:cacheprovider tests/gpu 2>&1 | tail -40 | tee "$OUT/pytest.txt"
if [ "${BENCH:-0}" = 1 ]; then
  if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
  fi
  timeout ${BENCH_TIMEOUT:-300} python3 benchmarks/bench_attention.py --impls ${BENCH_IMPLS:-jax_fa4,cudnn,fa3} \
    --no-bwd ${BENCH_ARGS:-} --out "$OUT/bench_fwd.json" 2>&1 | tail -60 | tee "$OUT/bench.txt"
fi
