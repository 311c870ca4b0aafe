#!/bin/bash
# One device call (repo root, H200): does the L2 take 16-byte per-thread dQ atomics as well as the
# bulk reduce? hd256 V1024 (= V0 + RedV4: red.global.add.v4 in fragment order) beside V0 (8-byte
# red.global.add.v2, row-major) and the library's V788 (bulk reduce from the ring): harness check
# (default and deterministic), then palindromic kernel-only timing at 2k and 16k. ~1.5 min.
OUT=${OUT:-/tmp/redv4_out}; mkdir -p "$OUT"; S=$OUT/summary.txt
T0=$SECONDS; el() { echo $((SECONDS-T0)); }
. cuda/hopper/harness_build.sh
build_bwd_harness; echo "[$(el)s] built rc=$?" >> $S
OMP_NUM_THREADS=16 timeout 90 /tmp/m/chk --hd 256 --variants 1024,0 --opts 1 > $OUT/check.txt 2>&1
echo "[$(el)s] check rc=$? $(grep 'cases passed' $OUT/check.txt)" >> $S
grep -E "^FAIL|DIFFERS" $OUT/check.txt | head -10 >> $S
timeout 150 /tmp/m/chk --no-check --bench --hd 256 --seqs 2048,16384 --variants 788,0,1024,1024,0,788 --opts 5 > $OUT/bench.txt 2>&1
echo "[$(el)s] bench rc=$?" >> $S; grep -E "^ +256 " $OUT/bench.txt >> $S
cat $S
