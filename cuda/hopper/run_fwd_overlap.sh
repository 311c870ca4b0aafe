#!/bin/bash
# One device call (repo root, H200), ~2 minutes: forward v9 OverlapTiles at hd64 (V14 = V12 + two Q
# buffers + the next tile's first S issued with this tile's last PV, the epilogue under it).
# Checks (also with 3 and 1 CTAs: every tile change overlapped), then palindromic kernel-only
# timing against V12 at 2k-8k, causal and not.
OUT=${OUT:-/tmp/ovl_out}; mkdir -p "$OUT"; S=$OUT/summary.txt
T0=$SECONDS; el() { echo $((SECONDS-T0)); }
. cuda/hopper/harness_build.sh
build_fwd_harness; echo "[$(el)s] fwd built rc=$?" >> $S
H=$OUT/check.txt
timeout 60 /tmp/f/chk --hd 64 --variants 14,15 >> $H 2>&1; echo "[$(el)s] hd64 V14 rc=$? $(grep 'cases passed' $H | tail -1)" >> $S
for m in 3 1; do timeout 60 /tmp/f/chk --hd 64 --variants 14,15 --max-ctas $m >> $H 2>&1; echo "[$(el)s] hd64 V14 max-ctas $m rc=$? $(grep 'cases passed' $H | tail -1)" >> $S; done
grep -E "^FAIL|mismatch|NaN" $H | head -8 >> $S
B=$OUT/bench.txt
timeout 150 /tmp/f/chk --no-check --bench --hd 64 --seqs 2048,4096,8192 --variants 12,14,15,15,14,12 >> $B 2>&1; echo "[$(el)s] bench hd64 rc=$?" >> $S
grep -E "^ +64 +(yes|no) " $B >> $S
cat $S
