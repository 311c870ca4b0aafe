#!/bin/bash
# One device call (repo root, H200), ~3 minutes: fwd v12 candidates, the persistent kernel with O
# written from registers (ODirect), so the next tile's Q loads under this tile's last PV and
# epilogue where no O buffer fits: hd128 V17 = V14 + Persist + ODirect, hd256 V7 = V5 + Persist +
# ODirect. Checks (also with 3 CTAs: many tiles per CTA), then palindromic kernel-only timing
# against the library's variant at 2k / 4k / 16k, causal and not.
OUT=${OUT:-/tmp/fwd7o_out}; mkdir -p "$OUT"; S=$OUT/summary.txt
T0=$SECONDS; el() { echo $((SECONDS-T0)); }
. cuda/hopper/harness_build.sh
build_fwd_harness; echo "[$(el)s] fwd built rc=$?" >> $S
for hv in 128:17 256:7; do h=${hv%:*}; v=${hv#*:}
  timeout 60 /tmp/f/chk --hd $h --variants $v >> $OUT/check.txt 2>&1; echo "[$(el)s] hd$h V$v rc=$? $(grep 'cases passed' $OUT/check.txt | tail -1)" >> $S
  timeout 60 /tmp/f/chk --hd $h --variants $v --max-ctas 3 >> $OUT/check.txt 2>&1; echo "[$(el)s] hd$h V$v 3 CTAs rc=$? $(grep 'cases passed' $OUT/check.txt | tail -1)" >> $S
done
grep -E "^FAIL|mismatch|NaN" $OUT/check.txt | head -8 >> $S
for hv in 128:14:17 256:5:7; do IFS=: read h a b <<< "$hv"
  timeout 120 /tmp/f/chk --no-check --bench --hd $h --seqs 2048,4096,16384 --variants $a,$b,$b,$a >> $OUT/bench.txt 2>&1; echo "[$(el)s] bench hd$h rc=$?" >> $S
done
grep -E "^ +(128|256) +(yes|no) " $OUT/bench.txt >> $S
cat $S
