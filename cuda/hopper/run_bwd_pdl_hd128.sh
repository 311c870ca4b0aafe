#!/bin/bash
# Session 6 (repo root, H200), ~1.5 minutes: the hd128 backward (library V51) with programmatic
# dependent launch (opts 3 = fused + PDL; causal 7 = + LPT) against the library's launch (1; causal
# 5): checks, then palindromic timings of the whole backward (pre + main + post) at 2k-16k.
OUT=${OUT:-/tmp/pdl_out}; mkdir -p "$OUT"; S=$OUT/summary.txt
T0=$SECONDS; el() { echo $((SECONDS-T0)); }
. cuda/hopper/harness_build.sh
build_bwd_harness; echo "[$(el)s] built rc=$?" >> $S
timeout 60 /tmp/m/chk --hd 128 --variants 51 --opts 3,7 > $OUT/check.txt 2>&1
echo "[$(el)s] check rc=$? $(grep 'cases passed' $OUT/check.txt)" >> $S; grep -E "^FAIL|DIFFERS" $OUT/check.txt | head -5 >> $S
timeout 150 /tmp/m/chk --no-check --bench --hd 128 --seqs 2048,4096,16384 --variants 51 --opts 1,3,3,1 > $OUT/bench_nc.txt 2>&1
echo "[$(el)s] bench o1/o3 rc=$?" >> $S; grep -E "^ +128 +no" $OUT/bench_nc.txt >> $S
timeout 100 /tmp/m/chk --no-check --bench --hd 128 --seqs 2048,4096 --variants 51 --opts 5,7,7,5 > $OUT/bench_c.txt 2>&1
echo "[$(el)s] bench o5/o7 rc=$?" >> $S; grep -E "^ +128 +yes" $OUT/bench_c.txt >> $S
cat $S
