#!/bin/bash
# Session 6, third device call (repo root, H200), ~2 minutes: hd64 forward tiles for short causal
# sequences in the persistent kernel: V17 = 2 warpgroups 128x128, V18 = V12 with 64-key blocks.
# Checks (also with 3 CTAs), then palindromic kernel-only timing against V12 at 2k-8k.
OUT=${OUT:-/tmp/s6c_out}; mkdir -p "$OUT"; S=$OUT/summary.txt
T0=$SECONDS; el() { echo $((SECONDS-T0)); }
. cuda/hopper/harness_build.sh
build_fwd_harness; echo "[$(el)s] fwd built rc=$?" >> $S
H=$OUT/check.txt
timeout 90 /tmp/f/chk --hd 64 --variants 17,18 >> $H 2>&1; echo "[$(el)s] hd64 V17,18 rc=$? $(grep 'cases passed' $H | tail -1)" >> $S
timeout 60 /tmp/f/chk --hd 64 --variants 17,18 --max-ctas 3 >> $H 2>&1; echo "[$(el)s] hd64 V17,18 max-ctas 3 rc=$? $(grep 'cases passed' $H | tail -1)" >> $S
grep -E "^FAIL|mismatch|NaN" $H | head -8 >> $S
B=$OUT/bench.txt
timeout 200 /tmp/f/chk --no-check --bench --hd 64 --seqs 2048,4096,8192 --variants 12,17,18,18,17,12 >> $B 2>&1; echo "[$(el)s] bench hd64 rc=$?" >> $S
grep -E "^ +64 +(yes|no) " $B >> $S
cat $S
