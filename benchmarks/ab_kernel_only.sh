#!/bin/bash
# Kernel-only A/B of two revisions of the Hopper kernels, through the standalone harnesses
# (tests/gpu/cuda/{fwd,bwd}_kernel_check.cu), in alternating rounds (A B A B ...), so that clock and
# thermal drift fall on both sides alike.
#
#   benchmarks/ab_kernel_only.sh build REV OUT       build fwd_check, bwd_check and bwd_check_race
#                                                   of git revision REV (or "." for the working
#                                                   tree) into OUT; needs nvcc, no GPU (build here,
#                                                   carry OUT to the GPU machine)
#   benchmarks/ab_kernel_only.sh run A B ROUNDS fwd|bwd ARGS...
#                                                   ROUNDS alternating runs of A/<harness> and
#                                                   B/<harness> with ARGS (e.g. --no-check --bench
#                                                   --configs library --hd 128 --seqs 16384); prints
#                                                   the rows of each run under "== A round 1" etc.
#
# The flags are tests/gpu/validate.sh's harness flags.
set -euo pipefail
NVCC_FLAGS="-std=c++17 -O2 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -lineinfo -Xcompiler -fopenmp"

build() {  # REV OUT
  local rev=$1 out src
  out=$(mkdir -p "$2" && cd "$2" && pwd)
  if [ "$rev" = "." ]; then
    src=$(git rev-parse --show-toplevel)
  else
    src=$(mktemp -d)
    git archive "$rev" cuda tests/gpu/cuda | tar -x -C "$src"
  fi
  mkdir -p "$out/obj/fwd" "$out/obj/bwd" "$out/obj/bwd_race"
  local f pids=()
  (cd "$src" && nvcc $NVCC_FLAGS -Icuda -c cuda/hopper/common/tensor_map.cu -o "$out/obj/tensor_map.o") & pids+=($!)
  for f in cuda/hopper/fwd/hd64.cu cuda/hopper/fwd/hd128.cu cuda/hopper/fwd/hd256.cu cuda/hopper/fwd/launch.cu \
           cuda/hopper/decode/split_kv.cu tests/gpu/cuda/fwd_kernel_check.cu; do
    (cd "$src" && nvcc $NVCC_FLAGS -Icuda -c "$f" -o "$out/obj/fwd/$(basename "$f" .cu).o") & pids+=($!)
  done
  for f in cuda/hopper/bwd/hd64.cu cuda/hopper/bwd/hd128.cu cuda/hopper/bwd/hd256.cu cuda/hopper/bwd/launch.cu \
           tests/gpu/cuda/bwd_kernel_check.cu; do
    (cd "$src" && nvcc $NVCC_FLAGS -Icuda -c "$f" -o "$out/obj/bwd/$(basename "$f" .cu).o") & pids+=($!)
    # The racecheck build (docs/hopper-kernels.md A.6): every consumer thread arrives itself.
    (cd "$src" && nvcc $NVCC_FLAGS -Icuda -DFA4_BWD_RELEASE_EVERY_THREAD=1 -c "$f" \
      -o "$out/obj/bwd_race/$(basename "$f" .cu).o") & pids+=($!)
    # Two cores here: at most a few compiles at once.
    while [ "$(jobs -rp | wc -l)" -ge "${JOBS:-4}" ]; do sleep 1; done
  done
  for f in "${pids[@]}"; do wait "$f"; done
  nvcc $NVCC_FLAGS "$out"/obj/fwd/*.o "$out/obj/tensor_map.o" -o "$out/fwd_check"
  nvcc $NVCC_FLAGS "$out"/obj/bwd/*.o "$out/obj/tensor_map.o" -o "$out/bwd_check"
  nvcc $NVCC_FLAGS "$out"/obj/bwd_race/*.o "$out/obj/tensor_map.o" -o "$out/bwd_check_race"
  rm -rf "$out/obj"
  [ "$rev" = "." ] || rm -rf "$src"
  echo "built $rev into $out"
}

run() {  # A B ROUNDS fwd|bwd ARGS...
  local a=$1 b=$2 rounds=$3 which=$4 r
  shift 4
  for r in $(seq 1 "$rounds"); do
    echo "== A round $r"; "$a/${which}_check" "$@" | grep -E "^ +[0-9]+ " || true
    echo "== B round $r"; "$b/${which}_check" "$@" | grep -E "^ +[0-9]+ " || true
  done
}

case "${1:-}" in
  build) build "$2" "$3" ;;
  run) shift; run "$@" ;;
  *) sed -n '2,16p' "$0"; exit 2 ;;
esac
