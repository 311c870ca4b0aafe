#!/bin/bash
# One device call (repo root, H200), ~2 minutes. Where the forward's cycles go at 2k vs 16k.
# hd64 V14 = V12 + PhaseClocks (the persistent kernel), hd128 V15 = V0 + PhaseClocks (the plain
# kernel, V14's tile without TrimFirst; fwd_phase_clock.cuh): checks, then kernel-only timing beside
# the uninstrumented kernel at 2k / 4k / 16k, causal and not, with the per-phase shares of a consumer
# warpgroup's span (Q wait, issue-turn wait, issue incl. K/V waits, S wait, softmax, PV wait,
# epilogue) and cycles per tile. The instrumented time vs the plain one says what the clock reads cost.
# (Session 7 call 1 also timed SoftmaxChains here; those variants are gone: commit 92a1203.)
OUT=${OUT:-/tmp/fwd7_out}; mkdir -p "$OUT"; S=$OUT/summary.txt
T0=$SECONDS; el() { echo $((SECONDS-T0)); }
. cuda/hopper/harness_build.sh
build_fwd_harness; echo "[$(el)s] fwd built rc=$?" >> $S
timeout 60 /tmp/f/chk --hd 64 --variants 14 > $OUT/check.txt 2>&1; echo "[$(el)s] hd64 V14 rc=$? $(grep 'cases passed' $OUT/check.txt | tail -1)" >> $S
timeout 60 /tmp/f/chk --hd 128 --variants 15 >> $OUT/check.txt 2>&1; echo "[$(el)s] hd128 V15 rc=$? $(grep 'cases passed' $OUT/check.txt | tail -1)" >> $S
timeout 150 /tmp/f/chk --no-check --bench --hd 64 --seqs 2048,4096,16384 --variants 12,14,12 > $OUT/bench.txt 2>&1; echo "[$(el)s] bench hd64 rc=$?" >> $S
timeout 150 /tmp/f/chk --no-check --bench --hd 128 --seqs 2048,4096,16384 --variants 14,15,14 >> $OUT/bench.txt 2>&1; echo "[$(el)s] bench hd128 rc=$?" >> $S
grep -E "^ +(64|128) +(yes|no) |phases" $OUT/bench.txt >> $S
cat $S
