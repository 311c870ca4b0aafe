#!/bin/bash
# One device call (repo root, H200), ~3 minutes: fwd v11, the persistent hd64 kernel skipping per
# warpgroup the causal diagonal's key blocks none of its rows see (V16 = V12 + WgSkip; V17 = V16 +
# TrimFirst). Checks (and with 3 CTAs, many tiles per CTA), then palindromic kernel-only timing
# against the library's V12 at 2k / 4k / 8k, causal and not. (Session 7 call 2 ran it before the
# warp-uniform n_mine: V16 -5..-8% without a mask; call 3 after.)
OUT=${OUT:-/tmp/fwd7s_out}; mkdir -p "$OUT"; S=$OUT/summary.txt
T0=$SECONDS; el() { echo $((SECONDS-T0)); }
. cuda/hopper/harness_build.sh
build_fwd_harness; echo "[$(el)s] fwd built rc=$?" >> $S
timeout 90 /tmp/f/chk --hd 64 --variants 16,17 > $OUT/check.txt 2>&1; echo "[$(el)s] hd64 V16,V17 rc=$? $(grep 'cases passed' $OUT/check.txt | tail -1)" >> $S
timeout 60 /tmp/f/chk --hd 64 --variants 16,17 --max-ctas 3 >> $OUT/check.txt 2>&1; echo "[$(el)s] hd64 V16,V17 3 CTAs rc=$? $(grep 'cases passed' $OUT/check.txt | tail -1)" >> $S
grep -E "^FAIL|mismatch|NaN" $OUT/check.txt | head -8 >> $S
timeout 200 /tmp/f/chk --no-check --bench --hd 64 --seqs 2048,4096,8192 --variants 12,16,17,17,16,12 > $OUT/bench.txt 2>&1; echo "[$(el)s] bench rc=$?" >> $S
grep -E "^ +64 +(yes|no) " $OUT/bench.txt >> $S
cat $S
