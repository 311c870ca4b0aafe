#!/bin/bash
# Session 6's hd128 backward measurements (repo root, H200), ~1 minute each, whole backward (pre +
# main + post), palindromic, checks first:
#   bash cuda/hopper/run_bwd_hd128_session6.sh pdl         # V51 with programmatic dependent launch
#                                                          # (opts 3; causal 7 = + LPT) vs 1 / 5
#   bash cuda/hopper/run_bwd_hd128_session6.sh persistent  # V59 = V51 + Persistent (the library's hd128
#                                                          # default on branch bwd-persistent-hd128: tile
#                                                          # counter in the workspace, 0 spills), also with
#                                                          # 3 CTAs (many tiles each); timings 2k-16k
MODE=${1:-persistent}
OUT=${OUT:-/tmp/bwd128_out}; mkdir -p "$OUT"; S=$OUT/summary.txt
T0=$SECONDS; el() { echo $((SECONDS-T0)); }
. cuda/hopper/harness_build.sh
build_bwd_harness; echo "[$(el)s] built rc=$?" >> $S
if [ "$MODE" = pdl ]; then
  check="--variants 51 --opts 3,7"
  bench=("--seqs 2048,4096,16384 --variants 51 --opts 1,3,3,1" "--seqs 2048,4096 --variants 51 --opts 5,7,7,5")
else
  check="--variants 59 --opts 1,5"
  timeout 60 /tmp/m/chk --hd 128 --variants 59 --opts 1,5 --max-ctas 3 > $OUT/check_ctas3.txt 2>&1
  echo "[$(el)s] check 3 CTAs rc=$? $(grep 'cases passed' $OUT/check_ctas3.txt)" >> $S; grep -E "^FAIL|DIFFERS" $OUT/check_ctas3.txt | head -5 >> $S
  bench=("--seqs 2048,4096,8192,16384 --variants 51,59,59,51 --opts 5")
fi
timeout 60 /tmp/m/chk --hd 128 $check > $OUT/check.txt 2>&1
echo "[$(el)s] check rc=$? $(grep 'cases passed' $OUT/check.txt)" >> $S; grep -E "^FAIL|DIFFERS" $OUT/check.txt | head -5 >> $S
for b in "${bench[@]}"; do
  timeout 150 /tmp/m/chk --no-check --bench --hd 128 $b >> $OUT/bench.txt 2>&1; echo "[$(el)s] bench $b rc=$?" >> $S
done
grep -E "^ +128 " $OUT/bench.txt >> $S
cat $S
