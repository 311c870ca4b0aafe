#!/bin/bash
# Session 6, second device call (repo root, H200), ~3 minutes: forward v8 at hd64 (the persistent
# kernel's tile-to-tile transition): V14 = V12 + 3 K/V stages, V15 = V12 + 2 Q buffers (the next
# tile's Q loads a whole tile ahead), V16 = both. Checks (also with 3 CTAs: many tiles per CTA, so
# both Q buffers cycle), then palindromic kernel-only timing against V12 at 2k-8k, causal and not.
# Also the hd256 backward V4096 with the LPT grid off (o1) and on (o5), causal, palindromic.
OUT=${OUT:-/tmp/s6b_out}; mkdir -p "$OUT"; S=$OUT/summary.txt
T0=$SECONDS; el() { echo $((SECONDS-T0)); }
. cuda/hopper/harness_build.sh
build_fwd_harness; echo "[$(el)s] fwd built rc=$?" >> $S
H=$OUT/check.txt
timeout 90 /tmp/f/chk --hd 64 --variants 14,15,16 >> $H 2>&1; echo "[$(el)s] hd64 V14-16 rc=$? $(grep 'cases passed' $H | tail -1)" >> $S
timeout 60 /tmp/f/chk --hd 64 --variants 15,16 --max-ctas 3 >> $H 2>&1; echo "[$(el)s] hd64 V15,16 max-ctas 3 rc=$? $(grep 'cases passed' $H | tail -1)" >> $S
grep -E "^FAIL|mismatch|NaN" $H | head -8 >> $S
B=$OUT/bench.txt
timeout 200 /tmp/f/chk --no-check --bench --hd 64 --seqs 2048,4096,8192 --variants 12,14,15,16,16,15,14,12 >> $B 2>&1; echo "[$(el)s] bench hd64 rc=$?" >> $S
grep -E "^ +64 +(yes|no) " $B >> $S
build_bwd_harness; echo "[$(el)s] bwd built rc=$?" >> $S
timeout 120 /tmp/m/chk --no-check --bench --hd 256 --seqs 2048,8192 --variants 4096 --opts 1,5,5,1 > $OUT/bwd_lpt.txt 2>&1
echo "[$(el)s] bwd lpt rc=$?" >> $S; grep -E "^ +256 +yes" $OUT/bwd_lpt.txt >> $S
cat $S
