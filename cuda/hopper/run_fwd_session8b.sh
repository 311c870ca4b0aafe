#!/bin/bash
# (Historical: V19 / V20 were retired after this call; commit fcc5968 still builds them.)
# One device call (repo root, H200), ~2.5 minutes: session 8's second forward call.
#  (1) The library after adopting TrimFirstPv (hd128 V17, hd256 V7) with the loop step folded into
#      one lambda (library SASS changed by the fold; main loops unchanged at 738 / 547 instructions):
#      harness checks of the library variants.
#  (2) hd128 V19 = the persistent OInQ 128 x 176 kernel + TrimFirst, V20 = V19 + TrimFirstPv (without
#      a mask; causal = V0): checked (also V20 with 3 CTAs, many tiles per CTA) and timed
#      palindromically against V17 at 2k / 4k / 16k (the hd128 non-causal 2k cell is 0.97x cuDNN).
OUT=${OUT:-/tmp/fwd8b_out}; mkdir -p "$OUT"; S=$OUT/summary.txt
T0=$SECONDS; el() { echo $((SECONDS-T0)); }
. cuda/hopper/harness_build.sh
build_fwd_harness; echo "[$(el)s] fwd built rc=$?" >> $S
for hv in 128:17 256:7 128:19 128:20; do h=${hv%:*}; v=${hv#*:}
  timeout 60 /tmp/f/chk --hd $h --variants $v >> $OUT/check.txt 2>&1; echo "[$(el)s] hd$h V$v rc=$? $(grep 'cases passed' $OUT/check.txt | tail -1)" >> $S
done
timeout 60 /tmp/f/chk --hd 128 --variants 20 --max-ctas 3 >> $OUT/check.txt 2>&1; echo "[$(el)s] hd128 V20 max-ctas 3 rc=$? $(grep 'cases passed' $OUT/check.txt | tail -1)" >> $S
grep -E "^FAIL|mismatch|NaN" $OUT/check.txt | head -8 >> $S
timeout 150 /tmp/f/chk --no-check --bench --hd 128 --seqs 2048,4096,16384 --variants 17,20,19,19,20,17 >> $OUT/bench.txt 2>&1; echo "[$(el)s] bench hd128 V17/V20/V19 rc=$? (non-causal rows count; causal is V0 in all three)" >> $S
timeout 60 /tmp/f/chk --no-check --bench --hd 128 --seqs 2048 --variants 17,20,17,20 >> $OUT/bench.txt 2>&1; echo "[$(el)s] bench hd128 2k again rc=$?" >> $S
grep -E "^ +(64|128|256) +(yes|no) " $OUT/bench.txt >> $S
python3 cuda/hopper/palindrome.py $OUT/bench.txt >> $S
cat $S
