#!/bin/bash
# One device call (repo root, H200), ~2.5 minutes, forward harness only. With the L2-sized Lpt
# sections (fwd_schedule.h; hd64 causal 2k / 4k +11% kernel-only in call 2), does the persistent
# causal kernel now pay at hd128 (V13: 128x128 with an O buffer; session 3 measured no gain with
# one section over all pairs) and hd64 at 8k / 16k (V16 vs V0)? And hd128 non-causal 2k / 4k: V6
# (persistent 128x128, O buffer) vs V17 again (calls 1-2: +1.4 / +1.8% at 2k, -1.2% at 4k).
T0=$SECONDS; el() { echo $((SECONDS-T0)); }
OUT=${OUT:-/tmp/s9c_out}; mkdir -p "$OUT"; S=$OUT/summary.txt
. cuda/hopper/harness_build.sh
build_fwd_harness; echo "[$(el)s] fwd harness built rc=$?" >> $S
C=/tmp/f/chk
timeout 60 $C --hd 128 --variants 13 > $OUT/check.txt 2>&1; echo "[$(el)s] check hd128 V13 rc=$? $(grep 'cases passed' $OUT/check.txt | tail -1)" >> $S
timeout 60 $C --hd 128 --variants 13 --max-ctas 3 >> $OUT/check.txt 2>&1; echo "[$(el)s] V13 3 CTAs rc=$? $(grep 'cases passed' $OUT/check.txt | tail -1)" >> $S
timeout 60 $C --hd 128 --variants 13 --max-ctas 5 --section 1 >> $OUT/check.txt 2>&1; echo "[$(el)s] V13 5 CTAs section 1 rc=$? $(grep 'cases passed' $OUT/check.txt | tail -1)" >> $S
grep -E "^FAIL" $OUT/check.txt | head -5 >> $S
timeout 90 $C --no-check --bench --hd 128 --seqs 2048,4096 --variants 17,13,6,6,13,17 > $OUT/bench.txt 2>&1; echo "[$(el)s] hd128 bench rc=$?" >> $S
timeout 90 $C --no-check --bench --hd 64 --seqs 8192,16384 --variants 0,16,16,0 >> $OUT/bench.txt 2>&1; echo "[$(el)s] hd64 bench rc=$?" >> $S
python3 cuda/hopper/palindrome.py $OUT/bench.txt >> $S
cat $S
