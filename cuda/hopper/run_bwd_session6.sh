#!/bin/bash
# Session 6's first device call (repo root, H200), ~3 minutes: the two hd256 backward candidates
# prepared in session 5, both harness-only, compiled but never run:
#   V1808 = V788's schedule with RedV4 (16-byte dQ atomics from the consumers; no ring staging, no
#           writer warp)
#   V4096 = the 64 x 80 kernel (cuda/hopper/bwd_kv80.cuh): transposed dK/dV/dQ products, 20% less
#           dQ reduce traffic per query, RedV4 adds, one dO stage
# Checks (default, deterministic, library det; LPT grid off and on), then palindromic kernel-only
# timing 788,1808,4096,4096,1808,788 at 2k-16k, causal and not. If V4096 fails its check, the
# FA4_DQ_HALVES-style debugging starts from check.txt (which cases, dq or dk/dv).
OUT=${OUT:-/tmp/s6_out}; mkdir -p "$OUT"; S=$OUT/summary.txt
T0=$SECONDS; el() { echo $((SECONDS-T0)); }
. cuda/hopper/harness_build.sh
build_bwd_harness; echo "[$(el)s] built rc=$?" >> $S
for v in 1808 4096; do
  OMP_NUM_THREADS=16 timeout 90 /tmp/m/chk --hd 256 --variants $v --opts 1,5 > $OUT/check_$v.txt 2>&1
  echo "[$(el)s] check V$v rc=$? $(grep 'cases passed' $OUT/check_$v.txt)" >> $S
  grep -E "^FAIL|DIFFERS" $OUT/check_$v.txt | head -6 >> $S
done
timeout 240 /tmp/m/chk --no-check --bench --hd 256 --seqs 2048,4096,8192,16384 --variants 788,1808,4096,4096,1808,788 --opts 5 > $OUT/bench.txt 2>&1
echo "[$(el)s] bench rc=$?" >> $S; grep -E "^ +256 " $OUT/bench.txt >> $S
cat $S
