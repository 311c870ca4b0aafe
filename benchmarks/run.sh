#!/bin/bash
# The benchmark on a GPU machine, from the repository root: builds and installs jax_fa4 with its
# CUDA kernels, installs any wheels carried in .whl/ (the FlashAttention-3 wheel) into /tmp/site,
# then runs benchmarks/bench_attention.py with this script's arguments, or by default
#   --impls jax_fa4,cudnn,fa3 --head-dims 64,128,256 --seqs 2k,4k,8k,16k --rounds 3
# $OUT (default /tmp/bench_out) gets bench.json (rewritten after every cell), bench.txt (the
# printed tables) and install.txt.
#   bash benchmarks/run.sh                                     # the recorded grid
#   bash benchmarks/run.sh --head-dims 128 --seqs 2k,4k --no-bwd --rounds 5
set -o pipefail
OUT=${OUT:-/tmp/bench_out}
mkdir -p "$OUT"
export JAX_FA4_ENABLE_CUDA=ON PYTHONUNBUFFERED=1 CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-16}
if [ -d .whl ] && compgen -G ".whl/*.whl" > /dev/null; then
  # --no-deps: nothing may shadow the machine's jax
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
if ! python3 -m pip install --no-build-isolation -q . > "$OUT/install.txt" 2>&1; then
  tail -40 "$OUT/install.txt"; exit 1
fi
[ $# -gt 0 ] || set -- --impls jax_fa4,cudnn,fa3 --head-dims 64,128,256 --seqs 2k,4k,8k,16k --rounds 3
# Run as a script from the root (not python3 -m), so the installed jax_fa4 is the one imported.
python3 benchmarks/bench_attention.py --out "$OUT/bench.json" "$@" 2>&1 | tee "$OUT/bench.txt"
