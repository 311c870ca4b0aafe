#!/bin/bash
# One device call (repo root, H200), ready for session 6: hd256 V1808 = the library's V788 schedule
# (SplitSdP + StsmPds + UniformWarpgroup) with RedV4 -- each consumer warpgroup frees its Q / dO
# stage as soon as its wgmmas retired and adds its dQ piece with 16-byte red.global.add.v4 -- in
# place of the DqInRing staging and the writer warp (session 5: V0 + RedV4 = V1024 came within
# 1-4% of V788). Check (default, det, lib det; LPT off and on), then palindromic timing
# 788,1808,1808,788 at 2k-16k, causal and not. ~2 minutes. If V1808 is correct and faster, make it
# bwd_default_variant(256) (and deterministic: its consumer-side semaphores are V0's), then
# cuda/hopper/run_final_check.sh check and bench.
OUT=${OUT:-/tmp/v1808_out}; mkdir -p "$OUT"; S=$OUT/summary.txt
T0=$SECONDS; el() { echo $((SECONDS-T0)); }
F="-std=c++17 -O2 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -Icuda -Xcompiler -fopenmp"; mkdir -p /tmp/m
for f in cuda/hopper/bwd_hd64.cu cuda/hopper/bwd_hd128.cu cuda/hopper/bwd_hd256.cu cuda/hopper/bwd_launch.cu cuda/hopper/tensor_map.cu tests/gpu/cuda/bwd_variants_hd64.cu tests/gpu/cuda/bwd_variants_hd128.cu tests/gpu/cuda/bwd_variants_hd256.cu tests/gpu/cuda/bwd_kernel_check.cu; do nvcc $F -c $f -o /tmp/m/$(basename $f .cu).o & done
for j in $(jobs -p); do wait $j 2>/dev/null; done
nvcc $F /tmp/m/*.o -o /tmp/m/chk; echo "[$(el)s] built rc=$?" >> $S
OMP_NUM_THREADS=16 timeout 90 /tmp/m/chk --hd 256 --variants 1808 --opts 1,5 > $OUT/check.txt 2>&1
echo "[$(el)s] check rc=$? $(grep 'cases passed' $OUT/check.txt)" >> $S
grep -E "^FAIL|DIFFERS" $OUT/check.txt | head -10 >> $S
timeout 200 /tmp/m/chk --no-check --bench --hd 256 --seqs 2048,4096,8192,16384 --variants 788,1808,1808,788 --opts 5 > $OUT/bench.txt 2>&1
echo "[$(el)s] bench rc=$?" >> $S; grep -E "^ +256 " $OUT/bench.txt >> $S
cat $S
