#!/usr/bin/env bash
# Lays out tokamax (the `tokamax` peer of benchmarks/bench_variants.py: its Mosaic GPU attention)
# for the GPU machine, which has no network: the wheels it needs beyond that machine's image go
# to .whl/ in this checkout (ignored through .git/info/exclude), and .whl/stub/ gets a stand-in for
# the one module it imports at load time only to profile (xprof's kernel-stats tool; the timing
# never calls it). Run here, from anywhere in the checkout:
#   bash benchmarks/prepare_tokamax.sh
# then carry ".whl" on the device call: tests/gpu/validate.sh installs .whl/*.whl into /tmp/site
# and its variants stage puts .whl/stub on PYTHONPATH; by hand:
#   python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
#   PYTHONPATH=/tmp/site:$PWD/.whl/stub python3 benchmarks/bench_variants.py --impls jax_fa4,tokamax
set -eu
root=$(git rev-parse --show-toplevel)
cd "$root"
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
mkdir -p .whl
# tokamax 0.0.17 and what the GPU machine's image lacks of its requirements (jax, jaxlib, flax,
# absl-py, jaxtyping, tqdm, numpy, protobuf and packaging are there); one version of each.
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl \
  tokamax==0.0.17 qwix==0.1.8 einshape==1.0 immutabledict==4.3.1 tensorboardx==2.6.5 \
  pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.7.0 typing-inspection==0.4.4 \
  typing-extensions==4.16.0 2>&1 | { grep -v '^WARNING: Location' || true; }
stub=.whl/stub/xprof/cli/tools
mkdir -p "$stub"
: > .whl/stub/xprof/__init__.py
: > .whl/stub/xprof/cli/__init__.py
: > "$stub/__init__.py"
cat > "$stub/get_kernel_stats_tool.py" <<'EOF'
"""Stand-in for xprof's kernel-stats tool: tokamax imports it at load time for its own profiler,
which the benchmark's timing never calls."""


def compute_kernel_stats(*args, **kwargs):
    raise NotImplementedError("xprof is not installed here: tokamax's profiler is unavailable")
EOF
ls .whl
