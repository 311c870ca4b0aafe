#!/bin/bash
# One device call (repo root, H200), ~4 minutes: the fwd candidates prepared in session 7 (NOTES,
# "Ready for session 8"), harness-only, each checked and then timed palindromically (kernel-only)
# against the library's variant:
#  (1) fwd v13 TrimFirstPv, the first (partial) key block's PV over its visible 16-key groups only
#      (the loop's first step peeled into the width switch): hd128 V17 = V14 + it, hd256 V7 = V5 +
#      it (without a mask; causal = V0). Predicted +1.5% at hd128 2k and 4k, +0.5-1% at hd256; their
#      main loops are also 32 / 54 instructions shorter than the library's.
#  (2) WgSkip in the plain kernel now that n_mine is warp-uniform (session 7): hd256 V8 = V0 +
#      WgSkip under the causal mask, without KWaitFirst (main loop 623 vs V0's 624 instructions);
#      hd64 V3 = V0 + WgSkip (571 vs 572) for causal above 4096 keys (the library's V0 there).
#  (3) Where the persistent hd128 kernel's cycles go at 2k vs 16k (V18 = V13 + PhaseClocks; V13 is
#      the persistent 128 x 176 OInQ / causal 128 x 128 kernel), beside V13 itself.
OUT=${OUT:-/tmp/fwd8_out}; mkdir -p "$OUT"; S=$OUT/summary.txt
T0=$SECONDS; el() { echo $((SECONDS-T0)); }
. cuda/hopper/harness_build.sh
build_fwd_harness; echo "[$(el)s] fwd built rc=$?" >> $S
for hv in 128:17 256:7 256:8 64:3 128:18; do h=${hv%:*}; v=${hv#*:}
  timeout 60 /tmp/f/chk --hd $h --variants $v >> $OUT/check.txt 2>&1; echo "[$(el)s] hd$h V$v rc=$? $(grep 'cases passed' $OUT/check.txt | tail -1)" >> $S
done
grep -E "^FAIL|mismatch|NaN" $OUT/check.txt | head -8 >> $S
for hv in 128:14:17 256:5:7; do IFS=: read h a b <<< "$hv"
  timeout 120 /tmp/f/chk --no-check --bench --hd $h --seqs 2048,4096,16384 --variants $a,$b,$b,$a >> $OUT/bench.txt 2>&1; echo "[$(el)s] bench hd$h V$a/V$b rc=$? (non-causal rows count)" >> $S
done
timeout 120 /tmp/f/chk --no-check --bench --hd 256 --seqs 2048,4096,16384 --variants 5,8,8,5 >> $OUT/bench.txt 2>&1; echo "[$(el)s] bench hd256 V5/V8 rc=$? (causal rows count)" >> $S
timeout 120 /tmp/f/chk --no-check --bench --hd 64 --seqs 8192,16384 --variants 0,3,3,0 >> $OUT/bench.txt 2>&1; echo "[$(el)s] bench hd64 V0/V3 rc=$? (causal rows count; variant 0 = the library: V0 above 4096 keys)" >> $S
timeout 90 /tmp/f/chk --no-check --bench --hd 128 --seqs 2048,16384 --variants 13,18,13 >> $OUT/bench.txt 2>&1; echo "[$(el)s] bench hd128 V13/V18 (phases) rc=$?" >> $S
grep -E "^ +(64|128|256) +(yes|no) |phases" $OUT/bench.txt >> $S
python3 cuda/hopper/palindrome.py $OUT/bench.txt >> $S  # per-variant means, relative to the first
cat $S
