#!/bin/bash
# One device call: build the standalone forward check, run it (correctness, then kernel timings),
# dump SASS facts, and time cuDNN on the same grid. Logs go to $OUT (or /tmp/fwd_out).
set -o pipefail
OUT=${OUT:-/tmp/fwd_out}
mkdir -p "$OUT" build/fwd_check
NVCC_FLAGS="-std=c++17 -O2 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -lineinfo -Icuda"
for f in cuda/hopper/fwd_*.cu cuda/hopper/tensor_map.cu tests/gpu/cuda/fwd_variants_hd*.cu tests/gpu/cuda/fwd_kernel_check.cu; do
  nvcc $NVCC_FLAGS -Xcompiler -fopenmp -Xptxas -v -c "$f" -o build/fwd_check/$(basename "$f" .cu).o \
    > build/fwd_check/$(basename "$f" .cu).log 2>&1 &
done
wait
cat build/fwd_check/*.log | grep -v C7519 | grep -E "error|Used|spill|C75" > "$OUT/ptxas.txt"
nvcc $NVCC_FLAGS -Xcompiler -fopenmp build/fwd_check/*.o -o build/fwd_check/fwd_check || { cat build/fwd_check/*.log | grep -i error; exit 1; }
cuobjdump --dump-sass build/fwd_check/fwd_hd128.o > build/fwd_check/hd128.sass
echo "HGMMA count in hd128 SASS: $(grep -c HGMMA build/fwd_check/hd128.sass)" | tee "$OUT/sass_facts.txt"
grep -m3 HGMMA build/fwd_check/hd128.sass | tee -a "$OUT/sass_facts.txt"
echo "local memory ops (LDL/STL): $(grep -cE 'LDL|STL' build/fwd_check/hd128.sass)" | tee -a "$OUT/sass_facts.txt"
timeout 300 build/fwd_check/fwd_check "$@" 2>&1 | tee "$OUT/fwd_check.txt"
