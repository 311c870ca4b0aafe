#!/bin/bash
# One device call (repo root, H200; carry .whl for FA3): Nsight Compute on one launch of our hd128
# backward and forward main kernels beside FlashAttention-3's (same cell, through JAX:
# benchmarks/profile_kernels.py), sections SpeedOfLight, ComputeWorkloadAnalysis, WarpStateStats,
# LaunchStats, Occupancy; --clock-control none (the benchmark's clocks). ~3 minutes.
T0=$SECONDS; el() { echo $((SECONDS-T0)); }
export JAX_FA4_ENABLE_CUDA=ON XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1 CMAKE_BUILD_PARALLEL_LEVEL=16
OUT=${OUT:-/tmp/ncu_out}; mkdir -p "$OUT"; S=$OUT/summary.txt
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
python3 -m pip install --no-build-isolation -q . > /tmp/install.txt 2>&1; echo "[$(el)s] install rc=$?" >> $S
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
SEC="--section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section LaunchStats --section Occupancy --section MemoryWorkloadAnalysis"
run() {  # name regex, then profile_kernels.py arguments; ONLY="tag ..." runs just those
  local tag=$1 re=$2; shift 2
  if [ -n "$ONLY" ] && [[ " $ONLY " != *" $tag "* ]]; then return; fi
  timeout 120 $NCU --clock-control none --target-processes all --kernel-name-base demangled -k "regex:$re" -c 1 $SEC \
    python3 benchmarks/profile_kernels.py "$@" > $OUT/ncu_$tag.txt 2>&1
  echo "[$(el)s] $tag rc=$? $(grep -cE 'Duration' $OUT/ncu_$tag.txt) duration lines" >> $S
}
run ours_bwd_4k "hopper::bwd_kernel<" --impl jax_fa4 --pass bwd --seq 4096
run fa3_bwd_4k "FlashAttnBwdSm90" --impl fa3 --pass bwd --seq 4096
run ours_bwd_c2k "hopper::bwd_kernel<" --impl jax_fa4 --pass bwd --seq 2048 --causal
run fa3_bwd_c2k "FlashAttnBwdSm90" --impl fa3 --pass bwd --seq 2048 --causal
run ours_fwd_2k "hopper::fwd_kernel" --impl jax_fa4 --pass fwd --seq 2048
run fa3_fwd_2k "FlashAttnFwd" --impl fa3 --pass fwd --seq 2048
cat $S
