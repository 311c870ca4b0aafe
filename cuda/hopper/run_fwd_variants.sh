#!/bin/bash
# One device call (repo root, H200, 16 cores): the forward kernel VARIANTS side by side (fwd v4 and
# v5 candidates, NOTES.md; variant list in cuda/hopper/fwd_config.cuh). Builds the standalone harness
# with every variant (library default for bf16/fp16 + tests/gpu/cuda/fwd_variants_hd*.cu, bf16),
# then per head dim: the correctness check of every variant against the float64 CPU forward (each
# stage under `timeout`; on a hang or a CUDA fault the variants of that head dim are rerun one by
# one to name the culprit), then kernel-only TFLOP/s at seq 2048, 4096 and 16384 on the FA3 grid,
# causal and not, of variant 0 (shipped), the fwd v5 variants and variant 0 once more at the end
# (clock drift over the sequence), and a table of each variant relative to variant 0.
# FWD_BENCH_ALL=1 also times the session-2 (fwd v4) variants, which measured no better than v2.
# No pip install, no pytest, no JAX. Target: < 3 minutes (build ~30 s, checks ~30-60 s, timings
# ~30 s); worst case (every stage timing out, one head dim's variants isolated) ~10 minutes, so
# the timings of a head dim are skipped once 480 s have passed (summary.txt is written as it goes).
# Output: $OUT/summary.txt (everything that matters) and $OUT/logs.tgz (full logs).
set -o pipefail
OUT=${OUT:-/tmp/fwd_var_out}
mkdir -p "$OUT" build/fwd_var
LOG=build/fwd_var
rm -f $LOG/*.txt $LOG/*.log  # no stale logs from an earlier call on the same machine
T0=$SECONDS
S="$OUT/summary.txt"
: > "$S"
stamp() { echo "[$((SECONDS - T0))s] $*" | tee -a "$S"; }
variants_of() { case $1 in 64) echo "0 1 2 3 4 5 6 7 8 9 10 11 12";; 128) echo "0 1 2 3 4 5 6 7 8 9 10 11 12 13";; *) echo "0 1 2 3 4";; esac; }
# Timed by default: variant 0, the fwd v5 variants (FA4 softmax tricks), variant 0 again.
bench_variants_of() {
  if [ -n "$FWD_BENCH_ALL" ]; then echo "$(variants_of $1) 0"; return; fi
  case $1 in 64) echo "0 8 9 10 11 0";; 128) echo "0 9 10 11 12 0";; *) echo "0";; esac
}
persist_variants_of() { case $1 in 64) echo 6,7,12;; 128) echo 6,7,8,13;; *) echo 4;; esac; }  # persistent kernels (12, 13: causal too)

NVCC_FLAGS="-std=c++17 -O2 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -lineinfo -Icuda"
SRCS="cuda/hopper/fwd_hd64.cu cuda/hopper/fwd_hd128.cu cuda/hopper/fwd_hd256.cu cuda/hopper/fwd_launch.cu
      cuda/hopper/tensor_map.cu tests/gpu/cuda/fwd_variants_hd64.cu tests/gpu/cuda/fwd_variants_hd128.cu
      tests/gpu/cuda/fwd_variants_hd256.cu tests/gpu/cuda/fwd_kernel_check.cu"
stamp "build (9 objects in parallel)"
for f in $SRCS; do
  n=$(basename "$f" .cu)
  timeout 300 nvcc $NVCC_FLAGS -Xcompiler -fopenmp -Xptxas -v -c "$f" -o $LOG/$n.o > $LOG/$n.log 2>&1 &
done
wait
if ! nvcc $NVCC_FLAGS -Xcompiler -fopenmp $LOG/*.o -o $LOG/fwd_check > $LOG/link.txt 2>&1; then
  stamp "BUILD FAILED"; grep -h -B2 -A5 error $LOG/*.log $LOG/link.txt | head -60 | tee -a "$S"
  tar czf "$OUT/logs.tgz" $LOG/*.log $LOG/link.txt 2>/dev/null; exit 1
fi
stamp "built"
{
  echo "--- ptxas: forward kernels (hd, dtype, causal, variant): registers at entry / stack / spills"
  for f in $LOG/fwd_hd*.log $LOG/fwd_variants_hd*.log; do
    grep -E "Compiling entry|Used|spill" "$f" | sed 's/ptxas info    : //' |
      awk '/Compiling entry/ {name=$0; next} /spill/ {sp=$0; next} /Used/ {if (name ~ /fwd_kernel/) print name " | " $0 " | " sp}' |
      sed -E 's/.*fwd_kernelI(13__nv_bfloat16|6__half)NS0_9FwdConfigILi([0-9]+)ELb([01])ELi([0-9]+)EEELb[01].*\|(.*)\|(.*)/hd\2 \1 causal\3 V\4 |\5|\6/;
              s/.*fwd_kernel_persistentI(13__nv_bfloat16|6__half)NS0_9FwdConfigILi([0-9]+)ELb([01])ELi([0-9]+)EEEEE.*\|(.*)\|(.*)/hd\2 \1 causal\3 V\4 persistent |\5|\6/'
  done | sort -u
  echo "nonzero spill lines: $(cat $LOG/*.log | grep -cE "[1-9][0-9]* bytes spill")"
  echo "C75xx notes other than C7519: $(grep -h C75 $LOG/*.log | grep -vc C7519)"
  if command -v cuobjdump > /dev/null; then
    for n in fwd_hd64 fwd_hd128 fwd_hd256 fwd_variants_hd64 fwd_variants_hd128 fwd_variants_hd256; do
      cuobjdump --dump-sass $LOG/$n.o > $LOG/$n.sass 2>/dev/null
      echo "$n.o: HGMMA $(grep -c HGMMA $LOG/$n.sass), LDL/STL $(grep -cE 'LDL|STL' $LOG/$n.sass)"
    done
    # fwd v5: MUFU.EX2 / FFMA / FMUL / VOTE per bf16 kernel (Exp2Emu moves exp2s from MUFU to FFMA)
    echo "--- SASS per bf16 kernel (hd causal variant): MUFU.EX2 FFMA FMUL VOTE"
    cat $LOG/fwd_hd64.sass $LOG/fwd_hd128.sass $LOG/fwd_variants_hd64.sass $LOG/fwd_variants_hd128.sass |
      awk '/Function :/ { if (n) print n, m, f, u, v; n = $3; m = f = u = v = 0; next }
           /MUFU.EX2/ { m++ } / FFMA / { f++ } / FMUL / { u++ } / VOTE/ { v++ }
           END { if (n) print n, m, f, u, v }' | grep bfloat16 |
      sed -E 's/.*(fwd_kernel(_persistent)?)I13__nv_bfloat16NS0_9FwdConfigILi([0-9]+)ELb([01])ELi([0-9]+)E[^ ]*/hd\3 causal\4 V\5 \1/' | sort -u
  fi
} >> "$S" 2>&1

export OMP_NUM_THREADS=16
for d in 64 128 256; do
  VS=$(variants_of $d)
  stamp "check hd$d, variants $VS"
  timeout 90 $LOG/fwd_check --hd $d --variants "${VS// /,}" > $LOG/check_hd$d.txt 2>&1
  rc=$?
  grep -E "^FAIL|cases passed|Lpt grid order" $LOG/check_hd$d.txt | head -20 | tee -a "$S"
  for v in $VS; do
    echo "  hd$d v$v: $(grep -c "^ok   v$v " $LOG/check_hd$d.txt) ok, $(grep -c "^FAIL v$v " $LOG/check_hd$d.txt) FAIL" | tee -a "$S"
  done
  stamp "check hd$d rc=$rc (0 pass, 1 numerical failures, 2 CUDA error, 124 timeout = hang?)"
  if { [ "$rc" = 124 ] || [ "$rc" = 2 ]; } && [ $((SECONDS - T0)) -lt 240 ]; then
    for v in $VS; do
      timeout 20 $LOG/fwd_check --hd $d --variants $v > $LOG/check_hd${d}_v$v.txt 2>&1
      stamp "  isolate hd$d v$v: rc=$? $(grep -E 'cases passed' $LOG/check_hd${d}_v$v.txt)"
    done
  fi
  # The persistent kernels with a grid of 3 CTAs: every CTA runs many tiles (the Q-empty barrier,
  # the rings and the O buffer across tiles); with one CTA per SM the small cases run one tile each.
  PV=$(persist_variants_of $d)
  timeout 40 $LOG/fwd_check --hd $d --variants $PV --max-ctas 3 > $LOG/check_hd${d}_persist3.txt 2>&1
  rc=$?
  grep -E "^FAIL" $LOG/check_hd${d}_persist3.txt | head -10 | tee -a "$S"
  stamp "check hd$d v$PV with --max-ctas 3: rc=$rc $(grep -E 'cases passed' $LOG/check_hd${d}_persist3.txt)"
done

stamp "kernel-only TFLOP/s, bf16, FA3 grid, median of 20"
for d in 64 128 256; do
  VS=$(bench_variants_of $d)
  if [ $((SECONDS - T0)) -gt 480 ]; then stamp "bench hd$d skipped (480 s passed)"; continue; fi
  timeout 60 $LOG/fwd_check --no-check --bench --hd $d --seqs 2048,4096,16384 --variants "${VS// /,}" > $LOG/bench_hd$d.txt 2>&1
  rc=$?
  grep -E "^ +(64|128|256) " $LOG/bench_hd$d.txt | tee -a "$S"
  [ "$rc" != 0 ] && stamp "bench hd$d rc=$rc $(grep -E 'error|CUDA' $LOG/bench_hd$d.txt | head -3)"
done
{
  echo "--- each variant / variant 0 (shipped, first timing), per cell (TFLOP/s of V0 in brackets;"
  echo "    v0again: variant 0 timed again after the others, i.e. the clock drift over the cell)"
  for col in 7 8; do
  [ $col = 8 ] && echo "--- the same, back-to-back timing (20 launches between two events: sustained clocks)"
  cat $LOG/bench_hd*.txt | awk -v c=$col '$1 ~ /^(64|128|256)$/ && NF >= c {
      key = $1 " " $2 " " $3; if (!(key in seen)) { seen[key] = 1; order[++n] = key }
      if ((key, $5) in t) again[key] = $c; else t[key, $5] = $c; if ($5 > maxv) maxv = $5 }
    END { for (i = 1; i <= n; ++i) { k = order[i]; split(k, a, " "); line = sprintf("hd%-3s causal %-3s seq %5s [%6.1f]", a[1], a[2], a[3], t[k, 0]);
            for (v = 1; v <= maxv; ++v) if ((k, v) in t && t[k, 0] > 0) line = line sprintf("  v%d %.3f", v, t[k, v] / t[k, 0]);
            if ((k in again) && t[k, 0] > 0) line = line sprintf("  v0again %.3f", again[k] / t[k, 0]);
            print line } }'
  done
  echo "cuDNN forward (latest JAX benchmark, jax_fa4 v2 / cuDNN at seq 2048): hd64 1.02x, causal 0.96x (348 vs 363);" \
       "hd128 0.96x (579 vs 602), causal 1.00x (472 vs 470); hd256 1.03x, causal 1.02x"
} >> "$S"
tail -n 80 "$S" | sed -n '/--- each variant/,$p'
tar czf "$OUT/logs.tgz" $LOG/*.log $LOG/*.txt 2>/dev/null
stamp "done"
