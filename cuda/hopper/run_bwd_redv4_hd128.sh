#!/bin/bash
# One device call (repo root, H200): hd128 V1073 (= V51 without DqViaTma, with RedV4: the consumers'
# 16-byte red.global.add.v4 dQ atomics in fragment order, no shared dQ tile) beside the library's
# V51 (bulk reduce of a 32 KB shared dQ tile by the writer warp): check, then palindromic timing.
OUT=${OUT:-/tmp/redv4_out}; mkdir -p "$OUT"; S=$OUT/summary.txt
T0=$SECONDS; el() { echo $((SECONDS-T0)); }
. cuda/hopper/harness_build.sh
build_bwd_harness; echo "[$(el)s] built rc=$?" >> $S
OMP_NUM_THREADS=16 timeout 60 /tmp/m/chk --hd 128 --variants 1073 --opts 1,5 > $OUT/check.txt 2>&1
echo "[$(el)s] check rc=$? $(grep 'cases passed' $OUT/check.txt)" >> $S
grep -E "^FAIL|DIFFERS" $OUT/check.txt | head -10 >> $S
timeout 100 /tmp/m/chk --no-check --bench --hd 128 --seqs 2048,8192 --variants 51,1073,1073,51 --opts 1 > $OUT/bench.txt 2>&1
echo "[$(el)s] bench rc=$?" >> $S; grep -E "^ +128 " $OUT/bench.txt >> $S
cat $S
