#!/bin/bash
# One device call (repo root, H200, 16 cores): the backward kernel VARIANTS side by side (bwd v2,
# NOTES.md). Builds the standalone harness with every variant (library default for bf16/fp16 +
# tests/gpu/cuda/bwd_variants_hd*.cu, bf16), then per head dim: the correctness check of every
# variant against the float64 CPU backward (each stage under `timeout`; on a hang or a CUDA
# fault the variants of that head dim are rerun one by one to name the culprit), then kernel-only
# TFLOP/s of every variant at seq 2048 and 16384 on the FA3 grid, causal and not.
# No pip install, no pytest, no JAX. Target: < 5 minutes; worst case (every stage timing out) ~9.5. Output: $OUT/summary.txt (everything
# that matters) and $OUT/logs.tgz (full logs).
#   Variants: 0 = v1 (library default), 1 = PipelineScores, 2 = DqViaTma, 3 = both; hd256: 0, 1,
#   4 = DqInRing (bwd v3); persistent variants (bwd v3) hd64/hd128 11 = 3 + Persistent, hd256
#   12 = 4 + Persistent, run in stages of their own so a hang there costs only its own timeout. Launch options (--opts bit mask, BwdLaunchOptions):
#   1 = dq_accum zeroed in a fused preprocess + grid-indexed postprocess, 2 = PDL (with 1), 4 =
#   causal LPT sections. Every variant is checked with options 0 and 7 and timed with 0 and 7; the
#   new candidates (hd64/hd128 3 and 11, hd256 4) also with 1, 3 and 5 to separate the options.
set -o pipefail
OUT=${OUT:-/tmp/bwd_out}
mkdir -p "$OUT" build/bwd_var
LOG=build/bwd_var
T0=$SECONDS
S="$OUT/summary.txt"
stamp() { echo "[$((SECONDS - T0))s] $*" | tee -a "$S"; }

NVCC_FLAGS="-std=c++17 -O2 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -lineinfo -Icuda"
SRCS="cuda/hopper/bwd_hd64.cu cuda/hopper/bwd_hd128.cu cuda/hopper/bwd_hd256.cu cuda/hopper/bwd_launch.cu
      cuda/hopper/tensor_map.cu tests/gpu/cuda/bwd_variants_hd64.cu tests/gpu/cuda/bwd_variants_hd128.cu
      tests/gpu/cuda/bwd_variants_hd256.cu tests/gpu/cuda/bwd_kernel_check.cu"
stamp "build (9 objects in parallel)"
for f in $SRCS; do
  n=$(basename "$f" .cu)
  timeout 300 nvcc $NVCC_FLAGS -Xcompiler -fopenmp -Xptxas -v -c "$f" -o $LOG/$n.o > $LOG/$n.log 2>&1 &
done
wait
if ! nvcc $NVCC_FLAGS -Xcompiler -fopenmp $LOG/*.o -o $LOG/bwd_check > $LOG/link.txt 2>&1; then
  stamp "BUILD FAILED"; grep -h -B2 -A5 error $LOG/*.log $LOG/link.txt | head -60 | tee -a "$S"
  tar czf "$OUT/logs.tgz" $LOG/*.log $LOG/link.txt 2>/dev/null; exit 1
fi
stamp "built"
{
  echo "--- ptxas: main kernels (variant V, causal C): registers / spills"
  for f in $LOG/bwd_hd*.log $LOG/bwd_variants_hd*.log; do
    grep -E "Compiling entry|Used|spill" "$f" | sed 's/ptxas info    : //' |
      awk '/Compiling entry/ {name=$0; next} /spill/ {sp=$0; next} /Used/ {if (name ~ /bwd_kernel/) print name " | " $0 " | " sp}' |
      sed -E 's/.*(bwd_kernel|bwd_kernel_persistent)I(13__nv_bfloat16|6__half)NS0_9BwdConfigILi([0-9]+)ELi([0-9]+)EEELb([01]).*\|(.*)\|(.*)/hd\3 \2 V\4 causal\5 \1 |\6|\7/'
  done | sort -u
  echo "nonzero spill lines: $(cat $LOG/*.log | grep -cE "[1-9][0-9]* bytes spill")"
  echo "C75xx notes: $(grep -h C75 $LOG/*.log | wc -l)"
  for n in bwd_variants_hd64 bwd_variants_hd128 bwd_variants_hd256; do
    cuobjdump --dump-sass $LOG/$n.o > $LOG/$n.sass 2>/dev/null
    echo "$n.o: HGMMA $(grep -c HGMMA $LOG/$n.sass), LDL/STL $(grep -cE 'LDL|STL' $LOG/$n.sass), RED $(grep -cE ' RED' $LOG/$n.sass), UBLKRED $(grep -c UBLKRED $LOG/$n.sass), BAR.ARV $(grep -c 'BAR.ARV' $LOG/$n.sass)"
  done
} >> "$S" 2>&1

export OMP_NUM_THREADS=16
for d in 64 128 256; do
  [ "$d" = 256 ] && VS="0 1 4" || VS="0 1 2 3"
  stamp "check hd$d, variants $VS, launch options 0 and 7"
  timeout 90 $LOG/bwd_check --hd $d --variants "${VS// /,}" --opts 0,7 > $LOG/check_hd$d.txt 2>&1
  rc=$?
  grep -E "^FAIL|cases passed" $LOG/check_hd$d.txt | head -20 | tee -a "$S"
  for v in $VS; do
    for o in 0 7; do
      echo "  hd$d v$v o$o: $(grep -c "^ok   v$v o$o " $LOG/check_hd$d.txt) ok, $(grep -c "^FAIL v$v o$o " $LOG/check_hd$d.txt) FAIL" | tee -a "$S"
    done
  done
  stamp "check hd$d rc=$rc (0 pass, 1 numerical failures, 2 CUDA error, 124 timeout = hang?)"
  if { [ "$rc" = 124 ] || [ "$rc" = 2 ]; } && [ $((SECONDS - T0)) -lt 300 ]; then
    for v in $VS; do
      for o in 0 7; do
        timeout 20 $LOG/bwd_check --hd $d --variants $v --opts $o > $LOG/check_hd${d}_v${v}_o$o.txt 2>&1
        stamp "  isolate hd$d v$v o$o: rc=$? $(grep -E 'cases passed' $LOG/check_hd${d}_v${v}_o$o.txt)"
      done
    done
  fi
  # The persistent variant alone: a hang (tile-id / kv_empty / dQ-writer protocol) costs only this.
  [ "$d" = 256 ] && P=12 || P=11
  timeout 45 $LOG/bwd_check --hd $d --variants $P --opts 0,7 > $LOG/check_hd${d}_v$P.txt 2>&1
  rc=$?
  grep -E "^FAIL|cases passed" $LOG/check_hd${d}_v$P.txt | head -10 | tee -a "$S"
  for o in 0 7; do
    echo "  hd$d v$P o$o: $(grep -c "^ok   v$P o$o " $LOG/check_hd${d}_v$P.txt) ok, $(grep -c "^FAIL v$P o$o " $LOG/check_hd${d}_v$P.txt) FAIL" | tee -a "$S"
  done
  stamp "check hd$d v$P rc=$rc"
  [ "$rc" = 0 ] && touch $LOG/persistent_ok_hd$d
done

stamp "kernel-only TFLOP/s (pre + main + post), bf16, FA3 grid, median of 10"
for d in 64 128 256; do
  [ "$d" = 256 ] && VS="0,1,4" && NEW=4 || { VS="0,1,2,3"; NEW=3; }
  timeout 60 $LOG/bwd_check --no-check --bench --hd $d --seqs 2048,16384 --variants $VS --opts 0,7 > $LOG/bench_hd$d.txt 2>&1
  rc=$?
  grep -E "^ +(64|128|256) " $LOG/bench_hd$d.txt | tee -a "$S"
  [ "$rc" != 0 ] && stamp "bench hd$d rc=$rc"
  timeout 40 $LOG/bwd_check --no-check --bench --hd $d --seqs 2048,16384 --variants $NEW --opts 1,3,5 > $LOG/bench_hd${d}_opts.txt 2>&1
  rc=$?
  grep -E "^ +(64|128|256) " $LOG/bench_hd${d}_opts.txt | tee -a "$S"
  [ "$rc" != 0 ] && stamp "bench hd$d options rc=$rc"
  [ "$d" = 256 ] && P=12 || P=11
  if [ -e $LOG/persistent_ok_hd$d ]; then
    timeout 30 $LOG/bwd_check --no-check --bench --hd $d --seqs 2048,16384 --variants $P --opts 0,7,1,3,5 > $LOG/bench_hd${d}_v$P.txt 2>&1
    rc=$?
    grep -E "^ +(64|128|256) " $LOG/bench_hd${d}_v$P.txt | tee -a "$S"
    [ "$rc" != 0 ] && stamp "bench hd$d v$P rc=$rc"
  else
    stamp "bench hd$d v$P skipped (its check did not pass)"
  fi
done
echo "cuDNN backward reference (NOTES.md, bench_attention.py): hd64 415/439 (2k/16k), causal 329/416;" \
     "hd128 499/535, causal 408/510; hd256 345/346, causal 301/388" >> "$S"
tar czf "$OUT/logs.tgz" $LOG/*.log $LOG/*.txt 2>/dev/null
stamp "done"
