#!/bin/bash
# Session 10, one device call (repo root, H200; carry .whl), ~3.5 minutes: more samples of the
# forward 2k / 4k cells at head dim 128, where the recorded runs put jax_fa4 and cuDNN within 1%
# at non-causal 2k (1.0064x and 0.9984x). Five rounds, forward only, jax_fa4 / cuDNN / FA3.
T0=$SECONDS; el() { echo $((SECONDS-T0)); }
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1 CMAKE_BUILD_PARALLEL_LEVEL=16 JAX_FA4_ENABLE_CUDA=ON
OUT=${OUT:-/tmp/tie_out}; mkdir -p "$OUT"; S=$OUT/summary.txt
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
python3 -m pip install --no-build-isolation -q . > /tmp/install.txt 2>&1; echo "[$(el)s] install rc=$?" >> $S
timeout $((560 - $(el))) python3 benchmarks/bench_attention.py --impls jax_fa4,cudnn,fa3 --head-dims 128 --seqs 2k,4k \
  --no-matmul --no-bwd --rounds 5 --cell-timeout 60 --out $OUT/tie.json > $OUT/tie.txt 2>&1; echo "[$(el)s] bench rc=$?" >> $S
grep -E "^\|" $OUT/tie.txt >> $S
grep -E "d=128 s=2048 .*causal=no" $OUT/tie.txt | cut -c1-100 >> $S
cat $S
