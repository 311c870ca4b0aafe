#!/bin/bash
# One device call (repo root, H200), ~1.5 minutes: where the persistent hd64 forward's cycles go.
# hd64 V14 = V12 + PhaseClocks (fwd_phase_clock.cuh): check, then kernel-only timing of V12 and V14
# at 2k / 4k / 16k, causal and not, with V14's per-phase shares of a consumer warpgroup's span
# (Q wait, issue-turn wait, issue incl. K/V waits, S wait, softmax, PV wait, epilogue) and cycles
# per tile. V14's own time vs V12 says what the clock reads cost.
OUT=${OUT:-/tmp/phases_out}; mkdir -p "$OUT"; S=$OUT/summary.txt
T0=$SECONDS; el() { echo $((SECONDS-T0)); }
. cuda/hopper/harness_build.sh
build_fwd_harness; echo "[$(el)s] fwd built rc=$?" >> $S
timeout 60 /tmp/f/chk --hd 64 --variants 14 > $OUT/check.txt 2>&1; echo "[$(el)s] hd64 V14 rc=$? $(grep 'cases passed' $OUT/check.txt | tail -1)" >> $S
timeout 150 /tmp/f/chk --no-check --bench --hd 64 --seqs 2048,4096,16384 --variants 12,14,12 > $OUT/bench.txt 2>&1; echo "[$(el)s] bench rc=$?" >> $S
grep -E "^ +64 +(yes|no) |v14 phases" $OUT/bench.txt >> $S
cat $S
