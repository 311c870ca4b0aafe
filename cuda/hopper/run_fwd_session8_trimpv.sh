#!/bin/bash
# One device call (repo root, H200), ~2.5 minutes: fwd v13 TrimFirstPv, the first (partial) key
# block's PV over its visible 16-key groups only (the loop's first step peeled into the width
# switch): hd128 V17 = V14 + it, hd256 V7 = V5 + it (without a mask; causal = V0). Checks (all
# CTAs), then palindromic kernel-only timing against the library's variant at 2k / 4k / 16k.
# Predicted (NOTES, session 7): +1.5% at hd128 2k and 4k (4 / 8 of 11 PV k-steps of one block in
# 12 / 24), +0.5-1% at hd256; the candidates' main loops are also 32 / 54 instructions shorter.
OUT=${OUT:-/tmp/fwd8t_out}; mkdir -p "$OUT"; S=$OUT/summary.txt
T0=$SECONDS; el() { echo $((SECONDS-T0)); }
. cuda/hopper/harness_build.sh
build_fwd_harness; echo "[$(el)s] fwd built rc=$?" >> $S
for hv in 128:17 256:7; do h=${hv%:*}; v=${hv#*:}
  timeout 60 /tmp/f/chk --hd $h --variants $v >> $OUT/check.txt 2>&1; echo "[$(el)s] hd$h V$v rc=$? $(grep 'cases passed' $OUT/check.txt | tail -1)" >> $S
done
grep -E "^FAIL|mismatch|NaN" $OUT/check.txt | head -8 >> $S
for hv in 128:14:17 256:5:7; do IFS=: read h a b <<< "$hv"
  timeout 120 /tmp/f/chk --no-check --bench --hd $h --seqs 2048,4096,16384 --variants $a,$b,$b,$a,$a,$b >> $OUT/bench.txt 2>&1; echo "[$(el)s] bench hd$h rc=$?" >> $S
done
grep -E "^ +(128|256) +no " $OUT/bench.txt >> $S
cat $S
