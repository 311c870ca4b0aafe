#!/bin/bash
# The GPU validation entry (repo root, on a Hopper machine): what must pass before a kernel change
# lands. Stages, in order, each under its own timeout inside one budget (BUDGET seconds):
#   install   pip install . (CMake builds every CUDA source; ptxas register/spill lines kept), or
#             with INSTALL_WHEEL=DIR the wheel the wheel stage built for these sources
#   harness   the standalone harnesses (tests/gpu/cuda): every named configuration and the
#             library entry checked against float64 on the host, outputs poisoned; the persistent
#             configurations also with many tiles per CTA and one-pair sections
#   tests     pytest tests/gpu (jax_fa4 through JAX against the float64 oracle, the error rule)
#   sanitize  compute-sanitizer memcheck, racecheck, synccheck and initcheck on the harnesses' small shapes
#             (SANITIZE_TOOLS picks the tools, SANITIZE_JOBS runs that many at once; beside the
#             tests when both run: SANITIZE_BESIDE=0 runs them after the tests instead)
#   bench     benchmarks/bench_attention.py $BENCH_ARGS (only when named in STAGES; fa4jax and the
#             FA3 binding from ../shared/peers when .peers/bin/env.sh is there)
#   variants  benchmarks/bench_variants.py $VARIANTS_ARGS (only when named in STAGES; the peers
#             from ../shared/peers when .peers/bin/env.sh is there, tokamax from .whl)
#   decode    benchmarks/bench_decode.py $DECODE_ARGS (only when named in STAGES; the FA3 binding
#             from ../shared/peers when .peers/bin/env.sh is there), then the harness's kernel-only
#             --decode-bench
#   wheel     only the Python 3.12 wheel with the kernels (no GPU needed: build here, carry WHEEL_DIR,
#             default .devrun/wheel, and name it INSTALL_WHEEL there), built against the GPU machine's
#             jax (JAX_VERSION, default 0.11.2) in a Python 3.12 environment in /tmp/fa4_py312 (PY312
#             names the interpreter), stamped with the sources' fingerprint (source.txt)
#   build     only the harness build (no GPU needed: build here, carry HARNESS_DIR), of the sources
#             under HARNESS_SRC (default the repository; a `git worktree` of another revision for an
#             A/B), into HARNESS_DIR (default /tmp/harness); BUILD_JOBS (default 16) compiles at once
#   ab        kernel-only A/B: AB_ROUNDS (default 2) rounds, in ABBA order, of $AB_BASE/${AB_HARNESS}_check
#             and this run's harness with $AB_ARGS (AB_HARNESS fwd or bwd; AB_BASE a HARNESS_DIR
#             of the other revision), e.g. AB_ARGS="--no-check --bench --configs library --hd 128";
#             or AB_BUILDS="base=DIR c1=DIR c2=DIR" for several builds, interleaved the same way
#             (the order reversed every round); a DIR holds ${AB_HARNESS}_check or its .xz. AB_ARGS
#             may hold several argument sets separated by ';' (shell quoting inside each)
# HARNESS_PREBUILT names a folder holding fwd_check and bwd_check (and bwd_check_race, the racecheck
# build with -DFA4_BWD_RELEASE_EVERY_THREAD=1) built with NVCC_FLAGS below, each as it is or as
# NAME.xz (the harness build is then skipped; STAGES=build HARNESS_XZ=1 writes the .xz beside them). TESTS_CAP (default 420 s) bounds the pytest stage; TESTS_ARGS (default tests/gpu) picks what it runs, so
# a run can be split over two device calls (tests/gpu took 440 s with 16 workers on the H200, and
# about twice that with 8: the fuzz's float64 oracle is CPU-bound; but at 16 workers the whole
# suite ran the GPU out of memory: the oracle's jit allocates 6-8 GB on the GPU for the largest
# fuzz cases and every worker keeps its peak, so PYTEST_WORKERS defaults to 12 on a card of 120 GB or
# more, 6 below (on an 80 GB H100, 12 workers made many fuzz cases fail at once: by the arithmetic,
# out of memory). TESTS_RESUME names an earlier run's $OUT/passed.txt (carried back): if it was
# written for the same sources, its tests are not run again. Without it, a run resumes what an
# earlier run on this machine passed on the same sources (kept in /tmp by fingerprint: another
# device call on the same warm machine needs nothing carried); TESTS_RESUME=none runs everything.
# A test that failed with the GPU out of memory (RESOURCE_EXHAUSTED) beside the other workers runs
# once more alone. STAGES (default "install harness tests sanitize"), BUDGET (default 570), OUT
# (default /tmp/validate). $OUT/summary.txt has the timeline and verdicts (and the tests'
# worker-seconds by file, from $OUT/durations.txt); the logs go beside it.
set -o pipefail
OUT=${OUT:-/tmp/validate}
BUDGET=${BUDGET:-570}
STAGES=${STAGES:-"install harness tests sanitize"}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)  # absolute: some stages run from /tmp
T0=$SECONDS
S=$OUT/summary.txt
stamp() { echo "[$((SECONDS - T0))s] $*" | tee -a "$S"; }
left() { echo $((BUDGET - (SECONDS - T0))); }
cap() { local l=$(($(left) - $2)); [ "$l" -lt "$1" ] && echo "$l" || echo "$1"; }  # own cap or what is left minus a reserve
has() { [[ " $STAGES " == *" $1 "* ]]; }

export JAX_FA4_ENABLE_CUDA=ON XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-16} OMP_NUM_THREADS=${OMP_NUM_THREADS:-16}
if [ -d .whl ]; then  # wheels the machine lacks (benchmark peers), carried
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site
fi

# The harness build runs beside the pip build.
H=${HARNESS_DIR:-/tmp/harness}
mkdir -p "$H" && H=$(cd "$H" && pwd)
NVCC_FLAGS="-std=c++17 -O2 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -lineinfo -Icuda -Xcompiler -fopenmp"
FWD_SRCS="cuda/hopper/fwd/hd64.cu cuda/hopper/fwd/hd128.cu cuda/hopper/fwd/hd256.cu cuda/hopper/fwd/launch.cu cuda/hopper/decode/split_kv.cu
          tests/gpu/cuda/fwd_kernel_check.cu"
BWD_SRCS="cuda/hopper/bwd/hd64.cu cuda/hopper/bwd/hd128.cu cuda/hopper/bwd/hd256.cu cuda/hopper/bwd/launch.cu
          tests/gpu/cuda/bwd_kernel_check.cu"
build_harness() {
  mkdir -p $H/fwd $H/bwd
  local f pids=()
  slot() { while [ "$(jobs -rp | wc -l)" -ge "${BUILD_JOBS:-16}" ]; do sleep 1; done; }
  nvcc $NVCC_FLAGS -c cuda/hopper/common/tensor_map.cu -o $H/tensor_map.o & pids+=($!)
  for f in $FWD_SRCS; do slot; nvcc $NVCC_FLAGS -c $f -o $H/fwd/$(basename $f .cu).o 2> $H/fwd/$(basename $f .cu).log & pids+=($!); done
  # bwd_race: the racecheck build of the backward (docs/hopper-kernels.md A.6, the lse / delta
  # report): every consumer thread arrives on the stage's empty barrier itself, so racecheck sees
  # each read ordered before the refill in one thread's program order.
  mkdir -p $H/bwd_race
  for f in $BWD_SRCS; do
    slot
    nvcc $NVCC_FLAGS -c $f -o $H/bwd/$(basename $f .cu).o 2> $H/bwd/$(basename $f .cu).log & pids+=($!)
    nvcc $NVCC_FLAGS -DFA4_BWD_RELEASE_EVERY_THREAD=1 -c $f -o $H/bwd_race/$(basename $f .cu).o 2> $H/bwd_race/$(basename $f .cu).log & pids+=($!)
  done
  for f in "${pids[@]}"; do wait $f; done
  nvcc $NVCC_FLAGS $H/fwd/*.o $H/tensor_map.o -o $H/fwd_check && nvcc $NVCC_FLAGS $H/bwd/*.o $H/tensor_map.o -o $H/bwd_check \
    && nvcc $NVCC_FLAGS $H/bwd_race/*.o $H/tensor_map.o -o $H/bwd_check_race
}

if command -v nvidia-smi > /dev/null; then
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee -a "$S"
fi
# A card of 120 GB or more (the H200) has room for 12 test workers and the sanitizers beside them.
GPU_MIB=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2> /dev/null | head -1)
BIG_GPU=$([ "${GPU_MIB:-0}" -ge 120000 ] && echo 1 || echo 0)
# The fingerprint of the sources a validation depends on (kernels, package, tests, build files):
# it keys the resumable passed lists and the prebuilt wheels. Every run prints it (STAGES=none
# prints it and stops).
SRC=$(find cuda jax_fa4 tests CMakeLists.txt pyproject.toml -type f \( -name '*.py' -o -name '*.cu' \
        -o -name '*.cuh' -o -name '*.h' -o -name '*.cc' -o -name '*.txt' -o -name '*.toml' \) \
        | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -c1-16)
stamp "sources $SRC"
if has wheel; then
  W=${WHEEL_DIR:-.devrun/wheel}
  if [ -z "${PY312:-}" ]; then  # the first Python 3.12 that runs (a pyenv shim may not)
    for c in python3.12 $(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12*/bin/python3.12 2> /dev/null); do
      "$c" -c "" 2> /dev/null && { PY312=$c; break; }
    done
  fi
  "${PY312:-false}" -c "" 2> /dev/null || { stamp "wheel: no Python 3.12 interpreter (set PY312)"; exit 2; }
  ENV=/tmp/fa4_py312
  if ! $ENV/bin/python -c "import jax, sys; sys.exit(jax.__version__ != '${JAX_VERSION:-0.11.2}')" 2> /dev/null; then
    "$PY312" -m venv $ENV && $ENV/bin/pip install -q "scikit-build-core>=0.10" "nanobind>=2.4" cmake ninja \
      "jax==${JAX_VERSION:-0.11.2}" > "$OUT/wheel.txt" 2>&1 || { stamp "wheel: environment failed ($OUT/wheel.txt)"; exit 1; }
  fi
  rm -rf "$W" && mkdir -p "$W"
  $ENV/bin/pip wheel -q --no-build-isolation --no-deps . -w "$W" >> "$OUT/wheel.txt" 2>&1 || { stamp "wheel: build failed ($OUT/wheel.txt)"; exit 1; }
  echo "# source $SRC" > "$W/source.txt"
  stamp "wheel in $W: $(cd "$W" && ls -s --block-size=K ./*.whl | tr '\n' ' ')"
fi
if has install; then
  # INSTALL_WHEEL names a folder from the wheel stage (built without a GPU): its wheel is
  # installed when it was built from these sources and imports with its kernels on this machine;
  # otherwise (or if it fails here) the package is built here.
  WHEEL_OK=0
  if [ -n "${INSTALL_WHEEL:-}" ]; then
    if [ "$(head -1 "$INSTALL_WHEEL/source.txt" 2> /dev/null)" = "# source $SRC" ]; then
      WHEEL_OK=1
      stamp "install the prebuilt wheel in $INSTALL_WHEEL (background; built here if it fails)"
    else
      stamp "INSTALL_WHEEL=$INSTALL_WHEEL was not built from these sources (# source $SRC): building here"
    fi
  fi
  [ "$WHEEL_OK" = 1 ] || stamp "pip install . (background)"
  (
    if [ "$WHEEL_OK" = 1 ]; then
      python3 -m pip install -q --no-deps --no-index --force-reinstall "$INSTALL_WHEEL"/*.whl > "$OUT/install.txt" 2>&1 \
        && (cd /tmp && python3 -c "import jax_fa4._ffi as f; assert f.built_with_cuda(), 'no CUDA kernels'") >> "$OUT/install.txt" 2>&1 \
        && { echo 0 > /tmp/install.rc; exit 0; }
      echo "the prebuilt wheel did not install or import (above): building here" >> "$OUT/install.txt"
    fi
    python3 -m pip install --no-build-isolation -q . >> "$OUT/install.txt" 2>&1
    echo $? > /tmp/install.rc
  ) &
  PIP=$!
fi
if [ -n "${HARNESS_PREBUILT:-}" ]; then  # fwd_check / bwd_check built elsewhere with the flags above
  # Each binary as it is or xz-compressed (NAME.xz: a third of the size to carry).
  mkdir -p $H
  for b in fwd_check bwd_check bwd_check_race; do
    if [ -f "$HARNESS_PREBUILT/$b" ]; then cp "$HARNESS_PREBUILT/$b" $H/
    elif [ -f "$HARNESS_PREBUILT/$b.xz" ]; then xz -dc "$HARNESS_PREBUILT/$b.xz" > $H/$b && chmod +x $H/$b
    elif [ $b != bwd_check_race ]; then stamp "HARNESS_PREBUILT=$HARNESS_PREBUILT has no $b (or $b.xz)"; exit 1
    fi
  done
  stamp "harness from $HARNESS_PREBUILT"
elif has harness || has sanitize || has build || { has ab && [ -z "${AB_BUILDS:-}" ]; }; then
  stamp "harness build of ${HARNESS_SRC:-.} into $H"
  (cd "${HARNESS_SRC:-.}" && build_harness) > "$OUT/harness_build.txt" 2>&1
  stamp "harness build rc=$?"
  if [ "${HARNESS_XZ:-0}" = 1 ]; then  # to carry to the GPU machine as HARNESS_PREBUILT
    for b in fwd_check bwd_check bwd_check_race; do [ -f $H/$b ] && xz -T0 -6 -c $H/$b > $H/$b.xz; done
    stamp "harness compressed: $(cd $H && ls -s --block-size=K ./*.xz | tr '\n' ' ')"
  fi
fi
# The harnesses do not need the package: they run while pip still builds.
wait_install() {
  [ -n "${PIP:-}" ] || return 0
  wait $PIP
  stamp "install rc=$(cat /tmp/install.rc)"
  PIP=
  [ "$(cat /tmp/install.rc)" = 0 ] || { tail -40 "$OUT/install.txt"; exit 1; }
}

if has harness; then
  F=$OUT/harness_fwd.txt B=$OUT/harness_bwd.txt
  # Each check runs up to 90 s, keeping 150 s of the budget for the stages after it when any runs.
  H_RESERVE=10
  { has tests || has sanitize || has bench || has variants || has decode || has ab; } && H_RESERVE=150
  run_h() {  # log, label, command...
    local log=$1 label=$2 t from rc; shift 2
    t=$(cap 90 $H_RESERVE)
    if [ "$t" -lt 10 ]; then stamp "$label: not run, the budget is spent (BUDGET=$BUDGET)"; return; fi
    echo "== $label: $*" >> $log
    from=$(($(wc -l < $log) + 1))  # this check's verdict only, not an earlier one's
    timeout "$t" "$@" >> $log 2>&1
    rc=$?
    stamp "$label rc=$rc$([ $rc = 124 ] && echo " (timed out after $t s)") $(tail -n +$from $log | grep -E '(cases|runs) passed' | tail -1)"
  }
  run_h $F "fwd harness: library + every configuration, dense and causal" $H/fwd_check --no-variants --no-decode
  run_h $F "fwd harness: library + every configuration, variants" $H/fwd_check --variants-only --no-decode
  run_h $F "fwd harness: library, decode shapes (split-KV path)" $H/fwd_check --decode-only
  run_h $F "fwd harness: persistent, 3 CTAs" $H/fwd_check --configs "hd64 persistent,hd128 persistent" --max-ctas 3 --no-decode
  run_h $F "fwd harness: persistent, 5 CTAs, one-pair sections" $H/fwd_check --configs "hd64 persistent,hd128 persistent" --max-ctas 5 --section 1 --no-decode
  run_h $B "bwd harness: library + every configuration, dense and causal" $H/bwd_check --no-variants ${BWD_CHECK_ARGS:-}
  run_h $B "bwd harness: library + every configuration, variants" $H/bwd_check --variants-only ${BWD_CHECK_ARGS:-}
  run_h $B "bwd harness: persistent, 3 CTAs" $H/bwd_check --config "hd128 persistent" --hd 128 --max-ctas 3
  grep -hE "^FAIL" $F $B 2> /dev/null | head -10 | tee -a "$S"
fi

# The sanitizers: compute-sanitizer over the harnesses' small shapes.
sanitize_stage() {
  sanitize() {  # tool, log name, harness binary, its arguments...
    local tool=$1 name=$2 log="$OUT/sanitize_$1_$2.txt"; shift 2
    timeout "$(cap ${SANITIZE_CAP:-200} 20)" compute-sanitizer --tool $tool --error-exitcode 9 "$@" > "$log" 2>&1
    stamp "compute-sanitizer $tool $* rc=$? $(grep -E '(cases|runs) passed' "$log" | tail -1) $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$log" | tail -1)"
    grep -m3 -E "^========= (Invalid|Race|Barrier|Error)" "$log" | tee -a "$S"
  }
  # The runs are independent processes: SANITIZE_JOBS (default 4) of them at a time.
  SPIDS=()
  throttle() {
    local n p
    while :; do
      n=0
      for p in "${SPIDS[@]}"; do kill -0 "$p" 2>/dev/null && n=$((n + 1)); done
      [ "$n" -lt "${SANITIZE_JOBS:-4}" ] && return
      sleep 2
    done
  }
  for tool in ${SANITIZE_TOOLS:-memcheck racecheck synccheck initcheck}; do
    # The decode path (split-KV kernel and combine) under memcheck and racecheck: its cases are
    # not part of --quick.
    for h in fwd bwd decode; do
      [ $h = decode ] && [ $tool != memcheck ] && [ $tool != racecheck ] && continue
      throttle
      [ "$(left)" -gt 40 ] || { stamp "sanitize: out of time before $tool $h"; break 2; }
      bin=$H/${h}_check args=--quick
      [ $h = decode ] && bin=$H/fwd_check args=--decode-only
      # racecheck of the backward: the racecheck build (above), whose only difference is who
      # arrives on the empty barriers; the shipped build's report is a known tool artefact (A.6).
      [ "$tool/$h" = racecheck/bwd ] && [ -x $H/bwd_check_race ] && bin=$H/bwd_check_race
      sanitize $tool $h $bin $args &
      SPIDS+=($!)
    done
  done
  for p in "${SPIDS[@]}"; do wait "$p"; done
}

# With the tests in the same run, the sanitizers run beside them (SANITIZE_BESIDE, default 1; 0
# runs them after the tests). Their small shapes take little GPU memory: on an 80 GB H100 beside 6
# test workers all ten runs finished clean in 101 s while 431 tests passed, none out of memory.
SAN_PID=
if has sanitize && has tests; then
  if [ "${SANITIZE_BESIDE:-1}" = 1 ]; then
    stamp "sanitizers beside the tests (background)"
    sanitize_stage &
    SAN_PID=$!
  fi
fi

if has tests; then
  wait_install
  if [ -z "${PYTEST_WORKERS:-}" ]; then  # the oracle's 6-8 GB a worker: 12 fit 141 GB, 6 fit 80 GB
    PYTEST_WORKERS=$([ "$BIG_GPU" = 1 ] && echo 12 || echo 6)
  fi
  # $OUT/passed.txt: the tests that passed, headed by a fingerprint of the sources; a later run of
  # the same sources (another device call, a later session) given it as TESTS_RESUME runs only
  # the rest of its selection. A file from other sources is refused, and everything runs.
  echo "# source $SRC" > "$OUT/passed.txt"
  unset FA4_SKIP_FILE
  KEPT=/tmp/fa4_validate_passed_$SRC.txt  # this machine's earlier runs of these sources
  if [ -z "${TESTS_RESUME:-}" ] && [ -s "$KEPT" ]; then
    TESTS_RESUME=$KEPT
    stamp "TESTS_RESUME unset: resuming this machine's earlier run of these sources ($KEPT; TESTS_RESUME=none runs all)"
  fi
  [ "${TESTS_RESUME:-}" = none ] && TESTS_RESUME=
  if [ -n "${TESTS_RESUME:-}" ]; then
    if [ "$(head -1 "$TESTS_RESUME" 2> /dev/null)" = "# source $SRC" ]; then
      grep -v '^#' "$TESTS_RESUME" | tee "$OUT/resumed.txt" >> "$OUT/passed.txt"
      export FA4_SKIP_FILE="$OUT/resumed.txt"
      stamp "resuming: $(wc -l < "$OUT/resumed.txt") tests passed before on these sources are deselected"
    else
      stamp "TESTS_RESUME=$TESTS_RESUME is not of these sources (# source $SRC): running everything"
    fi
  fi
  stamp "pytest tests/gpu ($PYTEST_WORKERS workers)"
  rm -f "$OUT/failed.txt" "$OUT/durations.txt"
  # No autotuning while testing (the tests compile hundreds of small programs). FA4_FAILED_FILE
  # (tests/failed_file.py): each failure's id and error as it happens, so that a run cut off by
  # its timeout still names its failures.
  XLA_FLAGS="${XLA_FLAGS:-} --xla_gpu_autotune_level=0" FA4_WORST_RATIO_FILE=/tmp/worst_ratio.txt \
    FA4_FAILED_FILE="$OUT/failed.txt" FA4_PASSED_FILE="$OUT/passed.txt" FA4_DURATIONS_FILE="$OUT/durations.txt" timeout "$(cap ${TESTS_CAP:-420} 60)" pytest -q -n $PYTEST_WORKERS -p no:cacheprovider --tb=short -W ignore ${TESTS_ARGS:-tests/gpu} \
    > "$OUT/pytest.txt" 2>&1
  rc=$?
  stamp "pytest rc=$rc$([ $rc = 5 ] && [ -n "${FA4_SKIP_FILE:-}" ] && echo ' (nothing left to run: every selected test passed before)')"
  grep -E "passed|failed|error" "$OUT/pytest.txt" | tail -2 | tee -a "$S"
  grep -E "^(FAILED|ERROR)" "$OUT/pytest.txt" | head -20 | tee -a "$S"
  [ -s "$OUT/failed.txt" ] && { echo "failures as they happened ($OUT/failed.txt):"; head -20 "$OUT/failed.txt"; } | tee -a "$S"
  # A test that failed only because the GPU ran out of memory beside the other workers (the float64
  # oracle's jit asks for up to 7 GB at once, and each worker's allocator keeps its peak: on an 80 GB
  # H100 one fuzz case hit it beside five workers) runs once more alone, with nothing beside it.
  # Its first failure stays in failed.txt and the summary; a pass alone is added to passed.txt.
  mapfile -t OOM < <(grep "RESOURCE_EXHAUSTED" "$OUT/failed.txt" 2> /dev/null | sed 's/ \[[a-z]*\]: .*//' | sort -u)
  if [ "${#OOM[@]}" -gt 0 ] && [ "$(left)" -gt 90 ]; then
    stamp "out of GPU memory beside the other workers: ${#OOM[@]} test(s) again, alone"
    XLA_FLAGS="${XLA_FLAGS:-} --xla_gpu_autotune_level=0" FA4_FAILED_FILE="$OUT/failed_alone.txt" \
      FA4_PASSED_FILE="$OUT/passed.txt" timeout "$(cap 180 30)" pytest -q -p no:cacheprovider --tb=short -W ignore \
      "${OOM[@]}" > "$OUT/pytest_alone.txt" 2>&1
    stamp "alone: pytest rc=$? $(grep -E "passed|failed|error" "$OUT/pytest_alone.txt" | tail -1)"
  fi
  cp "$OUT/passed.txt" "$KEPT.new" && mv "$KEPT.new" "$KEPT"
  cat /tmp/worst_ratio.txt 2>/dev/null | tee -a "$S"
  # Where the tests' time went (worker-seconds): by file, then the five longest tests.
  if [ -s "$OUT/durations.txt" ]; then
    awk -F'\t' '{split($2, a, "::"); t[a[1]] += $1; n[a[1]]++} END {for (f in t) printf "%8.0f s %5d tests  %s\n", t[f], n[f], f}' \
      "$OUT/durations.txt" | sort -rn | tee -a "$S"
    sort -rn "$OUT/durations.txt" | head -5 | tee -a "$S"
  fi
fi

if has sanitize; then
  if [ -n "$SAN_PID" ]; then wait "$SAN_PID"; else sanitize_stage; fi
fi

if has bench; then
  wait_install
  stamp "benchmark ${BENCH_ARGS:-}"
  (
    [ -f .peers/bin/env.sh ] && source .peers/bin/env.sh  # fa4jax and the FA3 binding
    timeout "$(cap 540 5)" python3 benchmarks/bench_attention.py ${BENCH_ARGS:-} --max-seconds $(($(left) - 20)) \
      --out "$OUT/bench.json"
  ) > "$OUT/bench.txt" 2>&1
  stamp "benchmark rc=$?"
  grep -E "^\|" "$OUT/bench.txt" > "$OUT/bench_tables.md"
fi

if has variants; then
  wait_install
  stamp "variants benchmark ${VARIANTS_ARGS:-}"
  (
    [ -f .peers/bin/env.sh ] && source .peers/bin/env.sh
    export PYTHONPATH=$PWD/benchmarks/stubs${PYTHONPATH:+:$PYTHONPATH}  # tokamax's xprof import
    timeout "$(cap 540 5)" python3 benchmarks/bench_variants.py ${VARIANTS_ARGS:-} --out "$OUT/variants.json"
  ) > "$OUT/variants.txt" 2>&1
  stamp "variants benchmark rc=$?"
  grep -E "fwd|matmul" "$OUT/variants.txt" | tail -60 | tee -a "$S"
fi
if has decode; then
  wait_install
  stamp "decode benchmark ${DECODE_ARGS:-}"
  (
    [ -f .peers/bin/env.sh ] && source .peers/bin/env.sh
    R=$PWD
    cd /tmp && timeout "$(cap 400 5)" python3 "$R/benchmarks/bench_decode.py" ${DECODE_ARGS:-} --out "$OUT/decode.json"
  ) > "$OUT/decode.txt" 2>&1
  stamp "decode benchmark rc=$?"
  grep -E "GB/s" "$OUT/decode.txt" | tee -a "$S"
  if [ -x $H/fwd_check ]; then
    timeout "$(cap 90 5)" $H/fwd_check --no-check --decode-bench > "$OUT/decode_kernel.txt" 2>&1
    tail -12 "$OUT/decode_kernel.txt" | tee -a "$S"
  fi
fi
if has ab; then
  # name=dir per build; without AB_BUILDS, A = AB_BASE against B = this run's harness.
  read -ra AB_LIST <<< "${AB_BUILDS:-A=${AB_BASE:-} B=$H}"
  AB_BIN=${AB_HARNESS:-fwd}_check
  declare -A AB_EXE
  for b in "${AB_LIST[@]}"; do
    n=${b%%=*} d=${b#*=}
    if [ -x "$d/$AB_BIN" ]; then AB_EXE[$n]=$d/$AB_BIN
    elif [ -f "$d/$AB_BIN.xz" ]; then
      mkdir -p "/tmp/ab_$n" && xz -dc "$d/$AB_BIN.xz" > "/tmp/ab_$n/$AB_BIN" && chmod +x "/tmp/ab_$n/$AB_BIN" \
        && AB_EXE[$n]=/tmp/ab_$n/$AB_BIN
    fi
    [ -n "${AB_EXE[$n]:-}" ] || { stamp "A/B: no $AB_BIN (or .xz) in '$d' for $n"; exit 1; }
  done
  stamp "A/B: ${AB_LIST[*]}; $AB_BIN ${AB_ARGS:-}"
  IFS=';' read -ra AB_SETS <<< "${AB_ARGS:-}"
  [ "${#AB_SETS[@]}" -gt 0 ] || AB_SETS=("")
  # ABBA: the order flips every round, so no build always runs first (on an H100, a build that
  # always ran second read 3.7% slower in one cell in both rounds, and level with the other in
  # four ABBA rounds of the same two builds).
  for set in "${AB_SETS[@]}"; do
    for r in $(seq 1 "${AB_ROUNDS:-2}"); do
      order=("${AB_LIST[@]}")
      if [ $((r % 2)) = 0 ]; then
        order=()
        for ((i = ${#AB_LIST[@]} - 1; i >= 0; i--)); do order+=("${AB_LIST[$i]}"); done
      fi
      for b in "${order[@]}"; do
        n=${b%%=*}
        echo "== $n round $r:$set" | tee -a "$S"
        eval "timeout \"\$(cap 120 10)\" \"\${AB_EXE[\$n]}\" $set" 2>&1 | grep -E "^ +[0-9]+ |error|FAIL" | tee -a "$S"
      done
    done
  done
fi
wait_install
stamp "done"
