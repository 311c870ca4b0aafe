#!/bin/bash
# One device call (repo root, H200; carry .whl for FA3), ~3 minutes: why our short-sequence forward
# loses more speed than cuDNN's under sustained load (session 8: hd64 causal 2k chain 0.357 ms per
# call right after a pause vs 0.385 ms after the benchmark's 0.3 s warm-up; cuDNN 0.373 / 0.380;
# kernel alone 319 vs 343 us). (1) benchmarks/clock_probe.py: per implementation, time per call,
# SM clock, power, temperature and clock-event reasons in the first 100 ms and the steady state of
# a 3 s back-to-back run (A B B A). (2) Nsight Compute, one launch each of ours and cuDNN's forward
# kernel: executed instructions, pipe utilisation and memory traffic (energy per call proxies).
# (3) Kernel-only (sustained: the harness warms up 0.3 s and never idles long), hd128 non-causal
# 2k / 4k: the library's V17 beside the persistent kernels with their own O buffer, V6 (128 x 128)
# and V8 (128 x 160), the layout closest to cuDNN's (persistent, 128-key blocks, 232 KB).
# Then V21 / V22 (= V6 / V8 + PhaseClocks): does the O buffer hide the Q wait and the store that
# OInQ (V18: Q wait 4.8% + epilogue 4.2% of a 2k tile) cannot? And V23 = V6 + a second Q buffer
# (the next tile's Q a whole tile ahead, as cuDNN's 232 KB suggests), checked with all, 3 and 1
# CTAs, timed beside them, V24 its phases. ~5.5 minutes in all.
T0=$SECONDS; el() { echo $((SECONDS-T0)); }
export JAX_FA4_ENABLE_CUDA=ON XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1 CMAKE_BUILD_PARALLEL_LEVEL=16
OUT=${OUT:-/tmp/power_out}; mkdir -p "$OUT"; S=$OUT/summary.txt
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
python3 -m pip install --no-build-isolation -q . > /tmp/install.txt 2>&1; echo "[$(el)s] install rc=$?" >> $S
nvidia-smi --query-gpu=name,power.limit,power.max_limit,clocks.max.sm,clocks.sm,temperature.gpu --format=csv >> $S 2>&1
for a in "--impls jax_fa4,cudnn --head-dim 64 --seq 2048 --causal" "--impls jax_fa4,cudnn,fa3 --head-dim 128 --seq 2048" \
         "--impls jax_fa4,cudnn --head-dim 128 --seq 16384"; do
  timeout 100 python3 benchmarks/clock_probe.py $a --out $OUT/probe_$(echo $a | tr -dc 'a-z0-9' | tail -c 24).json >> $OUT/probe.txt 2>&1
  echo "[$(el)s] clock_probe $a rc=$?" >> $S
done
grep -E "first .* late" $OUT/probe.txt >> $S
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
for a in "--head-dim 64 --seq 2048 --causal" "--head-dim 128 --seq 2048"; do for impl in jax_fa4 cudnn; do
  f=$OUT/ncu_${impl}_$(echo $a | tr -dc 'a-z0-9').txt
  timeout 60 $NCU --clock-control none -k "regex:fwd_kernel|fprop" -c 1 --section SpeedOfLight --section InstructionStats \
    --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis python3 benchmarks/profile_kernels.py --impl $impl --pass fwd --calls 1 $a > $f 2>&1
  echo "[$(el)s] ncu $impl $a rc=$? $(grep -E 'Duration|SM Frequency|Executed Instructions  |Issue Slots Busy|Memory Throughput|L2 Hit|Mem Busy' $f | tr -s ' ' | tr '\n' ';')" >> $S
done; done
. cuda/hopper/harness_build.sh
build_fwd_harness; echo "[$(el)s] fwd harness built rc=$?" >> $S
timeout 90 /tmp/f/chk --hd 128 --variants 6,8,23 > $OUT/check.txt 2>&1; echo "[$(el)s] check V6,V8,V23 rc=$? $(grep 'cases passed' $OUT/check.txt)" >> $S
timeout 60 /tmp/f/chk --hd 128 --variants 23 --max-ctas 3 >> $OUT/check.txt 2>&1; echo "[$(el)s] check V23 max-ctas 3 rc=$? $(grep 'cases passed' $OUT/check.txt | tail -1)" >> $S
timeout 60 /tmp/f/chk --hd 128 --variants 23 --max-ctas 1 >> $OUT/check.txt 2>&1; echo "[$(el)s] check V23 max-ctas 1 rc=$? $(grep 'cases passed' $OUT/check.txt | tail -1)" >> $S
grep -E "^FAIL" $OUT/check.txt | head -5 >> $S
timeout 60 /tmp/f/chk --no-check --bench --hd 128 --seqs 2048,4096 --variants 17,6,8,23,23,8,6,17 > $OUT/bench.txt 2>&1
echo "[$(el)s] bench hd128 V17/V6/V8/V23 rc=$? (non-causal rows count; causal = V0 in all)" >> $S
timeout 60 /tmp/f/chk --no-check --bench --hd 128 --seqs 2048,16384 --variants 21,22,24 >> $OUT/bench.txt 2>&1
echo "[$(el)s] phases hd128 V21 (= V6) / V22 (= V8) / V24 (= V23) rc=$?" >> $S
grep -E "^ +128 +no |phases" $OUT/bench.txt >> $S
python3 cuda/hopper/palindrome.py $OUT/bench.txt >> $S
cat $S
