#!/bin/bash
# One device call (repo root, H200), ~5 minutes: the persistent causal forward's L2-sized Lpt
# sections (fwd_schedule.h) against the old single section over all pairs. Call 1 of session 9
# found hd64 causal 2k at a 27% L2 hit rate and 2.75 TB/s of DRAM traffic (cuDNN 73%, 0.75 TB/s)
# and, in the power-capped steady state, 1.70 GHz against cuDNN's 1.88 GHz.
# (1) forward harness: checks of hd64 (library V16 under the mask) with the chosen sections, with
# 3 CTAs, and with 1-pair sections on 5 CTAs (many sections, the last one partial); kernel-only
# timing of hd64 2k / 4k, chosen sections (A) vs --section 256 (B: one section, as before), A B B A.
# (2) hd128 non-causal 2k: V17 / V8 / V6 palindromic (call 1: V8 +2.4%, V6 +1.4%, within noise).
# (3) the library through JAX: clock_probe hd64 causal 2k (jax_fa4, cudnn), ncu L2 / DRAM of ours,
# and bench_attention's hd64 cells.
T0=$SECONDS; el() { echo $((SECONDS-T0)); }
export JAX_FA4_ENABLE_CUDA=ON XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1 CMAKE_BUILD_PARALLEL_LEVEL=16
OUT=${OUT:-/tmp/s9b_out}; mkdir -p "$OUT"; S=$OUT/summary.txt
. cuda/hopper/harness_build.sh
build_fwd_harness; echo "[$(el)s] fwd harness built rc=$?" >> $S
C=/tmp/f/chk
timeout 60 $C --hd 64 --variants 16 > $OUT/check.txt 2>&1; echo "[$(el)s] check hd64 V16 rc=$? $(grep 'cases passed' $OUT/check.txt | tail -1)" >> $S
timeout 60 $C --hd 64 --variants 16 --max-ctas 3 >> $OUT/check.txt 2>&1; echo "[$(el)s] check V16 3 CTAs rc=$? $(grep 'cases passed' $OUT/check.txt | tail -1)" >> $S
timeout 60 $C --hd 64 --variants 16 --max-ctas 5 --section 1 >> $OUT/check.txt 2>&1; echo "[$(el)s] check V16 5 CTAs section 1 rc=$? $(grep 'cases passed' $OUT/check.txt | tail -1)" >> $S
grep -E "^FAIL" $OUT/check.txt | head -5 >> $S
i=0
for sec in 0 256 256 0 0 256; do
  i=$((i+1)); timeout 60 $C --no-check --bench --hd 64 --seqs 2048,4096 --variants 16 --section $sec > $OUT/bench_sec${sec}_$i.txt 2>&1
  grep -E "^ +64 +yes " $OUT/bench_sec${sec}_$i.txt | sed "s/^/section $sec: /" >> $OUT/sections.txt
done
echo "[$(el)s] sections bench done" >> $S
cat $OUT/sections.txt >> $S
for sec in 0 256; do for seq in 2048 4096; do
  grep "section $sec: .* $seq " $OUT/sections.txt | awk -v s=$sec -v q=$seq '{a+=$9; b+=$10; n++} END {printf "hd64 causal %d section %s: kernel %.1f b2b %.1f TF/s (n=%d)\n", q, (s==0?"chosen":s), a/n, b/n, n}' >> $S
done; done
timeout 60 $C --no-check --bench --hd 128 --seqs 2048 --variants 17,8,6,17,8,6,6,8,17 > $OUT/bench128.txt 2>&1
python3 cuda/hopper/palindrome.py $OUT/bench128.txt | grep full >> $S
echo "[$(el)s] hd128 2k V17/V8/V6" >> $S
python3 -m pip install --no-build-isolation -q . > /tmp/install.txt 2>&1; echo "[$(el)s] install rc=$?" >> $S
timeout 60 python3 benchmarks/clock_probe.py --impls jax_fa4,cudnn --head-dim 64 --seq 2048 --causal --out $OUT/probe64c.json > $OUT/probe.txt 2>&1
echo "[$(el)s] clock_probe rc=$?" >> $S; grep -E "first .* late" $OUT/probe.txt >> $S
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
for seq in 2048 4096; do
  f=$OUT/ncu_jax_fa4_64c_$seq.txt
  timeout 60 $NCU --clock-control none -k "regex:fwd_kernel" -c 1 --section SpeedOfLight --section MemoryWorkloadAnalysis python3 benchmarks/profile_kernels.py --impl jax_fa4 --pass fwd --calls 1 --head-dim 64 --seq $seq --causal > $f 2>&1
  echo "[$(el)s] ncu jax_fa4 hd64 causal $seq rc=$? $(grep -E 'Duration|SM Frequency|Memory Throughput|L2 Hit|Mem Busy' $f | tr -s ' ' | tr '\n' ';')" >> $S
done
timeout 150 python3 benchmarks/bench_attention.py --impls jax_fa4,cudnn --head-dims 64 --seqs 2k,4k --rounds 3 --no-bwd --out $OUT/bench64.json > $OUT/bench64.txt 2>&1
echo "[$(el)s] bench_attention hd64 rc=$?" >> $S; grep -E "^\|" $OUT/bench64.txt | head -20 >> $S
cat $S
