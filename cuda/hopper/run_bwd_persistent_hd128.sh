#!/bin/bash
# Session 6 (repo root, H200), ~1 minute: the hd128 backward as a persistent kernel (V59 = the
# library's V51 + Persistent, harness-only: static tile counter, 72-80 B producer spills) against
# V51 at 2k/4k: checks, then palindromic timings of the whole backward.
OUT=${OUT:-/tmp/bp_out}; mkdir -p "$OUT"; S=$OUT/summary.txt
T0=$SECONDS; el() { echo $((SECONDS-T0)); }
. cuda/hopper/harness_build.sh
build_bwd_harness; echo "[$(el)s] built rc=$?" >> $S
timeout 60 /tmp/m/chk --hd 128 --variants 59 --opts 1,5 > $OUT/check.txt 2>&1
echo "[$(el)s] check rc=$? $(grep 'cases passed' $OUT/check.txt)" >> $S; grep -E "^FAIL|DIFFERS" $OUT/check.txt | head -5 >> $S
timeout 100 /tmp/m/chk --no-check --bench --hd 128 --seqs 2048,4096 --variants 51,59,59,51 --opts 5 > $OUT/bench.txt 2>&1
echo "[$(el)s] bench rc=$?" >> $S; grep -E "^ +128 " $OUT/bench.txt >> $S
cat $S
