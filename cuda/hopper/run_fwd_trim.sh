#!/bin/bash
# One device call (repo root, H200): forward v7 TrimFirst (the first, partial key block multiplied
# over its visible columns only) as harness variants hd64 V13 (= V12 + TrimFirst, persistent),
# hd128 V14, hd256 V5 (= V0 + TrimFirst): checks (V13 also with 3 CTAs), then palindromic
# kernel-only timing against the library (variant 0; at hd64 below seq_k 4097 that is V12). ~2.5 min.
OUT=${OUT:-/tmp/trim_out}; mkdir -p "$OUT"; S=$OUT/summary.txt
T0=$SECONDS; el() { echo $((SECONDS-T0)); }
. cuda/hopper/harness_build.sh
build_fwd_harness; echo "[$(el)s] built rc=$?" >> $S
H=$OUT/check.txt
timeout 60 /tmp/f/chk --hd 128 --variants 0,14 >> $H 2>&1; echo "[$(el)s] hd128 V0,V14 rc=$? $(grep 'cases passed' $H | tail -1)" >> $S
timeout 60 /tmp/f/chk --hd 256 --variants 0,5 >> $H 2>&1; echo "[$(el)s] hd256 V0,V5 rc=$? $(grep 'cases passed' $H | tail -1)" >> $S
timeout 60 /tmp/f/chk --hd 64 --variants 0,13 >> $H 2>&1; echo "[$(el)s] hd64 V0,V13 rc=$? $(grep 'cases passed' $H | tail -1)" >> $S
timeout 40 /tmp/f/chk --hd 64 --variants 13 --max-ctas 3 >> $H 2>&1; echo "[$(el)s] hd64 V13 max-ctas 3 rc=$? $(grep 'cases passed' $H | tail -1)" >> $S
grep -E "^FAIL|mismatch|NaN" $H | head -8 >> $S
B=$OUT/bench.txt
timeout 120 /tmp/f/chk --no-check --bench --hd 128 --seqs 2048,4096,16384 --variants 0,14,14,0 >> $B 2>&1; echo "[$(el)s] bench hd128 rc=$?" >> $S
timeout 100 /tmp/f/chk --no-check --bench --hd 256 --seqs 2048,4096,16384 --variants 0,5,5,0 >> $B 2>&1; echo "[$(el)s] bench hd256 rc=$?" >> $S
timeout 100 /tmp/f/chk --no-check --bench --hd 64 --seqs 2048,4096 --variants 0,13,13,0 >> $B 2>&1; echo "[$(el)s] bench hd64 rc=$?" >> $S
grep -E "^ +(64|128|256) +(yes|no) " $B >> $S
cat $S
