#!/bin/bash
# The validate-and-record device calls (repo root, H200; carry .whl for FA3), one part per call so each
# fits the 10-minute limit:
#   bash cuda/hopper/run_final_check.sh check   # pip install, the standalone harness checks of the
#       library kernels (forward per head dim + the persistent hd64 V16 / hd128 V25 with 3 CTAs and with 5 CTAs in one-pair
#       sections; backward with the causal LPT grid off
#       and on; SKIP_FWD_HARNESS=1 skips the forward ones when no forward code changed; BWD_CHECK_VARIANTS, default the library's 51,59,4096), EXTRA_HARNESS (a backward
#       harness command line, optional, e.g. a timing), then pytest tests/gpu with autotuning off, then EXTRA_FWD_BENCH
#       (forward harness timing arguments, optional, when time is left).
#       ~4.5 minutes.
#   bash cuda/hopper/run_final_check.sh bench   # pip install, the side-by-side benchmark with
#       ROUNDS rounds (default 3; alternating order, median) over HEAD_DIMS (default 64,128,256),
#       and with DET=1 the hd256 deterministic-mode cost. ~3 minutes with 2 rounds.
# Output: $OUT/summary.txt, harness.txt, pytest.txt, bench*.json, bench_tables.md.
PART=${1:-check}
T0=$SECONDS; el() { echo $((SECONDS-T0)); }
export JAX_FA4_ENABLE_CUDA=ON XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1 CMAKE_BUILD_PARALLEL_LEVEL=16
OUT=${OUT:-/tmp/final_out}; mkdir -p "$OUT"
S=$OUT/summary.txt
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
(python3 -m pip install --no-build-isolation -q . > /tmp/install.txt 2>&1; echo $? > /tmp/install.rc) &
export OMP_NUM_THREADS=16
if [ "$PART" = check ]; then
  F="-std=c++17 -O2 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -Icuda -Xcompiler -fopenmp"; mkdir -p /tmp/f /tmp/m
  for f in cuda/hopper/fwd_hd64.cu cuda/hopper/fwd_hd128.cu cuda/hopper/fwd_hd256.cu cuda/hopper/fwd_launch.cu cuda/hopper/tensor_map.cu tests/gpu/cuda/fwd_variants_hd64.cu tests/gpu/cuda/fwd_variants_hd128.cu tests/gpu/cuda/fwd_variants_hd256.cu tests/gpu/cuda/fwd_kernel_check.cu; do nvcc $F -c $f -o /tmp/f/$(basename $f .cu).o & done
  for f in cuda/hopper/bwd_hd64.cu cuda/hopper/bwd_hd128.cu cuda/hopper/bwd_hd256.cu cuda/hopper/bwd_launch.cu tests/gpu/cuda/bwd_variants_hd64.cu tests/gpu/cuda/bwd_variants_hd128.cu tests/gpu/cuda/bwd_variants_hd256.cu tests/gpu/cuda/bwd_kernel_check.cu; do nvcc $F -c $f -o /tmp/m/$(basename $f .cu).o & done
  for j in $(jobs -p); do wait $j 2>/dev/null; done
  cp /tmp/f/tensor_map.o /tmp/m/
  nvcc $F /tmp/f/*.o -o /tmp/f/chk && nvcc $F /tmp/m/*.o -o /tmp/m/chk
  echo "[$(el)s] built rc=$?; install rc=$(cat /tmp/install.rc)" >> $S; tail -3 /tmp/install.txt >> $S
  H=$OUT/harness.txt
  if [ "${SKIP_FWD_HARNESS:-0}" != 1 ]; then  # (pytest tests/gpu runs the forward regardless)
    # The library's forward entry point per head dim (fwd_default_variant): hd64 0 (V16 up to seq_k 4096), hd128 17 (V25
    # up to 2048 keys without the mask, 4096 under it), hd256 9.
    for dv in 64:0 128:17 256:9; do d=${dv%:*}; v=${dv#*:}; timeout 60 /tmp/f/chk --hd $d --variants $v >> $H 2>&1; echo "[$(el)s] fwd harness hd$d library (V$v) rc=$? $(grep 'cases passed' $H | tail -1)" >> $S; done
    # The persistent kernels with many tiles per CTA: the library's sections on 3 CTAs, one-pair sections on 5.
    for dv in 64:16 128:25; do d=${dv%:*}; v=${dv#*:}
      timeout 40 /tmp/f/chk --hd $d --variants $v --max-ctas 3 >> $H 2>&1; echo "[$(el)s] fwd harness hd$d V$v max-ctas 3 rc=$? $(grep 'cases passed' $H | tail -1)" >> $S
      timeout 40 /tmp/f/chk --hd $d --variants $v --max-ctas 5 --section 1 >> $H 2>&1; echo "[$(el)s] fwd harness hd$d V$v max-ctas 5 section 1 rc=$? $(grep 'cases passed' $H | tail -1)" >> $S
    done
  fi
  timeout 150 /tmp/m/chk --variants ${BWD_CHECK_VARIANTS:-51,59,4096} --opts 1,5 >> $H 2>&1; echo "[$(el)s] bwd harness library, LPT off and on, rc=$? $(grep 'cases passed' $H | tail -1)" >> $S
  grep -E "^FAIL|DIFFERS" $H | head -8 >> $S
  if [ -n "$EXTRA_HARNESS" ]; then timeout 120 /tmp/m/chk $EXTRA_HARNESS > $OUT/extra.txt 2>&1; echo "[$(el)s] extra rc=$?" >> $S; grep -E "^ +[0-9]+ +(yes|no) " $OUT/extra.txt >> $S; fi
  XLA_FLAGS=--xla_gpu_autotune_level=0 FA4_WORST_RATIO_FILE=/tmp/worst.txt timeout $((500 - $(el))) pytest -v -n 8 -p no:cacheprovider --tb=short -W ignore tests/gpu/test_bwd_cuda.py tests/gpu/test_training_cuda.py tests/gpu/test_fwd_cuda.py 2>&1 | grep -vE "PytestBenchmarkWarning|warner\(|bringing up" > $OUT/pytest.txt; echo "[$(el)s] pytest done" >> $S
  grep -cE "PASSED" $OUT/pytest.txt >> $S; grep -E "^FAILED|^ERROR|^E  |passed|failed" $OUT/pytest.txt | tail -15 >> $S; cat /tmp/worst.txt >> $S 2>/dev/null
  if [ -n "$EXTRA_FWD_BENCH" ] && [ $(el) -lt 480 ]; then  # a forward harness timing, optional (information only)
    timeout $((560 - $(el))) /tmp/f/chk --no-check --bench $EXTRA_FWD_BENCH > $OUT/extra_fwd.txt 2>&1; echo "[$(el)s] extra fwd bench rc=$?" >> $S
    python3 cuda/hopper/palindrome.py $OUT/extra_fwd.txt >> $S
  fi
else
  wait
  echo "[$(el)s] install rc=$(cat /tmp/install.rc)" >> $S; tail -3 /tmp/install.txt >> $S
  timeout $((585 - $(el))) python3 benchmarks/bench_attention.py --impls jax_fa4,cudnn,fa3 --head-dims ${HEAD_DIMS:-64,128,256} --seqs 2k,4k,8k,16k --no-matmul --rounds ${ROUNDS:-3} --max-seconds $((470 - $(el))) --cell-timeout 60 --out $OUT/bench.json > /tmp/bench.txt 2>&1; echo "[$(el)s] bench rc=$?" >> $S
  grep -E "^\|" /tmp/bench.txt > $OUT/bench_tables.md; tail -2 /tmp/bench.txt >> $S
  if [ "${DET:-0}" = 1 ]; then
    timeout 60 python3 benchmarks/bench_attention.py --impls jax_fa4,jax_fa4_det --head-dims 256 --seqs 2k,16k --no-matmul --cell-timeout 40 --out $OUT/bench_det256.json > /tmp/bdet.txt 2>&1; echo "[$(el)s] det bench rc=$?" >> $S
    grep -E "^\|" /tmp/bdet.txt >> $OUT/bench_tables.md
  fi
fi
cat $S
