#!/bin/bash
# Builds, without a GPU, the wheel validate.sh installs on the GPU machine (INSTALL_WHEEL=DIR), so
# that its install stage takes seconds of device time instead of minutes of nvcc there: a cp312
# wheel (the GPU machine runs Python 3.12) with the Hopper kernels, built against the XLA FFI
# headers of the GPU machine's jax (JAX_VERSION, default 0.11.2) in a Python 3.12 virtual
# environment (PY312 names the interpreter; /tmp/fa4_py312 holds the environment). DIR (default
# .devrun/wheel, which .git/info/exclude should ignore; carry it) gets the wheel and source.txt,
# the fingerprint of the sources it was built from: validate.sh installs it only for the same
# sources. Run from the repository root; needs nvcc and pip's index.
set -euo pipefail
DIR=${1:-.devrun/wheel}
if [ -z "${PY312:-}" ]; then  # the first Python 3.12 that runs (a pyenv shim may not)
  for c in python3.12 $(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12*/bin/python3.12 2> /dev/null); do
    "$c" -c "" 2> /dev/null && { PY312=$c; break; }
  done
fi
"${PY312:-false}" -c "" 2> /dev/null || { echo "build_wheel.sh: no Python 3.12 interpreter (set PY312)"; exit 2; }
ENV=/tmp/fa4_py312
if [ ! -x $ENV/bin/python ] || ! $ENV/bin/python -c "import jax, sys; sys.exit(jax.__version__ != '${JAX_VERSION:-0.11.2}')"; then
  "$PY312" -m venv $ENV
  $ENV/bin/pip install -q "scikit-build-core>=0.10" "nanobind>=2.4" cmake ninja "jax==${JAX_VERSION:-0.11.2}"
fi
rm -rf "$DIR" && mkdir -p "$DIR"
src=$(bash tests/gpu/source_fingerprint.sh)
JAX_FA4_ENABLE_CUDA=ON $ENV/bin/pip wheel -q --no-build-isolation --no-deps . -w "$DIR"
echo "# source $src" > "$DIR/source.txt"
ls -l "$DIR"
