#!/bin/bash
# One device call (repo root, H200): the "2k gap" experiment of cuda/hopper/NOTES.md. Installs
# jax_fa4, times jax_fa4 beside cuDNN at seq 2048 with the CUDA handlers registered normally and as
# command-buffer compatible (JAX_FA4_FFI_COMMAND_BUFFER=1, jax_fa4/_ffi.py), then runs the forward and
# backward GPU tests with command buffers on and XLA forming graphs of any size. ~3 minutes.
OUT=${OUT:-/tmp/gap_out}; mkdir -p "$OUT"
T0=$SECONDS; el() { echo $((SECONDS-T0)); }
export JAX_FA4_ENABLE_CUDA=ON XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1 CMAKE_BUILD_PARALLEL_LEVEL=16
S=$OUT/summary.txt
python3 -m pip install --no-build-isolation -q . > /tmp/install.txt 2>&1; echo "[$(el)s] install rc=$?" >> $S
for cb in 0 1; do
  JAX_FA4_FFI_COMMAND_BUFFER=$cb timeout 40 python3 benchmarks/bench_attention.py --impls jax_fa4,cudnn --seqs 2k --no-matmul --cell-timeout 30 --out $OUT/bench_cb$cb.json > /tmp/b$cb.txt 2>&1
  echo "[$(el)s] bench command_buffer=$cb rc=$?" >> $S; grep -E "^\|" /tmp/b$cb.txt >> $S
done
XLA_FLAGS="--xla_gpu_autotune_level=0 --xla_gpu_graph_min_graph_size=1" JAX_FA4_FFI_COMMAND_BUFFER=1 timeout $((175 - $(el))) pytest -q -n 8 -p no:cacheprovider --tb=line -W ignore tests/gpu/test_fwd_cuda.py tests/gpu/test_bwd_cuda.py > /tmp/pt.txt 2>&1
echo "[$(el)s] pytest (command buffers on, min graph size 1) rc=$?" >> $S; grep -E "passed|failed|^FAILED|Error" /tmp/pt.txt | tail -12 >> $S
cat $S
