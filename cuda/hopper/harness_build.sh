#!/bin/bash
# Sourced by the device scripts (repo root): builds the standalone harnesses with nvcc, every
# source in parallel. build_bwd_harness -> /tmp/m/chk (backward: library + variant kernels),
# build_fwd_harness -> /tmp/f/chk (forward). Each returns nvcc's link status.
HARNESS_NVCC_FLAGS="-std=c++17 -O2 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -Icuda -Xcompiler -fopenmp"

_harness_build() {  # dir, sources...
  local dir=$1; shift
  mkdir -p "$dir"
  local pids=() f
  for f in "$@"; do nvcc $HARNESS_NVCC_FLAGS -c "$f" -o "$dir/$(basename "$f" .cu).o" 2>/dev/null & pids+=($!); done
  for f in "${pids[@]}"; do wait "$f"; done
  nvcc $HARNESS_NVCC_FLAGS "$dir"/*.o -o "$dir/chk"
}

build_bwd_harness() {
  _harness_build /tmp/m cuda/hopper/bwd_hd64.cu cuda/hopper/bwd_hd128.cu cuda/hopper/bwd_hd256.cu \
    cuda/hopper/bwd_launch.cu cuda/hopper/tensor_map.cu tests/gpu/cuda/bwd_variants_hd64.cu \
    tests/gpu/cuda/bwd_variants_hd128.cu tests/gpu/cuda/bwd_variants_hd256.cu tests/gpu/cuda/bwd_kernel_check.cu
}

build_fwd_harness() {
  _harness_build /tmp/f cuda/hopper/fwd_hd64.cu cuda/hopper/fwd_hd128.cu cuda/hopper/fwd_hd256.cu \
    cuda/hopper/fwd_launch.cu cuda/hopper/tensor_map.cu tests/gpu/cuda/fwd_variants_hd64.cu \
    tests/gpu/cuda/fwd_variants_hd128.cu tests/gpu/cuda/fwd_variants_hd256.cu tests/gpu/cuda/fwd_kernel_check.cu
}
