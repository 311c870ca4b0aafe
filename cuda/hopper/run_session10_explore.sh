#!/bin/bash
# One device call (repo root, H200), ~2.5 minutes, forward harness only (REUSE_FWD_HARNESS=1: the
# /tmp/f/chk that run_final_check.sh check just built, same sources and flags). Prepared in session 9 for
# after the recorded benchmark (`ROUNDS=3 bash cuda/hopper/run_final_check.sh bench`):
# (1) hd256 non-causal 2k, the thin cell (1.02 / 1.016 / 1.01 / 0.94x of cuDNN in four runs; 1024
#     equal tiles = 7.76 waves): the library V9 vs V4 (persistent, O staged in Q), V10 (= V4 +
#     TrimFirst; 168 registers, 0 spills) and V2 (128 x 64: no partial key block, 32 iterations
#     instead of 26);
# (2) the Lpt grid above 4096 keys, where the library still runs the plain grid under the causal
#     mask: hd128 V3 (= V0 + Lpt, V17's causal kernel on the Lpt grid) vs the library, and hd64 V4
#     (= V0 + Lpt) vs the library (V0 there); session 9 found +8-11% from Lpt at hd256 causal.
T0=$SECONDS; el() { echo $((SECONDS-T0)); }
OUT=${OUT:-/tmp/s10x_out}; mkdir -p "$OUT"; S=$OUT/summary.txt
. cuda/hopper/harness_build.sh
if [ "${REUSE_FWD_HARNESS:-0}" = 1 ] && [ -x /tmp/f/chk ]; then echo "[$(el)s] reusing /tmp/f/chk" >> $S; else build_fwd_harness; echo "[$(el)s] fwd harness built rc=$?" >> $S; fi
C=/tmp/f/chk
for dv in 256:4,10,2 128:3 64:4; do d=${dv%:*}; v=${dv#*:}
  timeout 60 $C --hd $d --variants $v >> $OUT/check.txt 2>&1; echo "[$(el)s] check hd$d V$v rc=$? $(grep 'cases passed' $OUT/check.txt | tail -1)" >> $S
done
grep -E "^FAIL" $OUT/check.txt | head -5 >> $S
timeout 60 $C --no-check --bench --hd 256 --seqs 2048,4096 --variants 9,4,10,2,2,10,4,9 > $OUT/bench.txt 2>&1; echo "[$(el)s] hd256 rc=$?" >> $S
timeout 90 $C --no-check --bench --hd 128 --seqs 8192,16384 --variants 17,3,3,17 >> $OUT/bench.txt 2>&1; echo "[$(el)s] hd128 rc=$?" >> $S
timeout 90 $C --no-check --bench --hd 64 --seqs 8192,16384 --variants 0,4,4,0 >> $OUT/bench.txt 2>&1; echo "[$(el)s] hd64 rc=$?" >> $S
python3 cuda/hopper/palindrome.py $OUT/bench.txt >> $S
cat $S
