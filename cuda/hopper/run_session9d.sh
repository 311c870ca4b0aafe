#!/bin/bash
# One device call (repo root, H200), ~2 minutes, forward harness only: hd256 causal, the one
# forward cell below cuDNN in session 9's recorded run (2k: 0.97x). The library's causal kernel
# (V7 = V0's 128x80 tile under the mask) on the plain grid vs the Lpt grid (V9 = V7 + Lpt under the
# mask; host model: busiest SM 13% above the mean on the plain grid, 2% with Lpt) and V1 (WgSkip +
# Lpt + KWaitFirst).
T0=$SECONDS; el() { echo $((SECONDS-T0)); }
OUT=${OUT:-/tmp/s9d_out}; mkdir -p "$OUT"; S=$OUT/summary.txt
. cuda/hopper/harness_build.sh
build_fwd_harness; echo "[$(el)s] fwd harness built rc=$?" >> $S
C=/tmp/f/chk
timeout 60 $C --hd 256 --variants 9,1 > $OUT/check.txt 2>&1; echo "[$(el)s] check hd256 V9,V1 rc=$? $(grep 'cases passed' $OUT/check.txt | tail -1)" >> $S
grep -E "^FAIL" $OUT/check.txt | head -5 >> $S
timeout 120 $C --no-check --bench --hd 256 --seqs 2048,4096,8192 --variants 7,9,1,1,9,7 > $OUT/bench.txt 2>&1; echo "[$(el)s] hd256 bench rc=$?" >> $S
python3 cuda/hopper/palindrome.py $OUT/bench.txt >> $S
cat $S
