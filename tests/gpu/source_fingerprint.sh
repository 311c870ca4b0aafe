#!/bin/bash
# Prints the fingerprint of the sources a GPU validation depends on (the kernels, the Python
# package, the tests, the build files): 16 hex digits. validate.sh keys its resumable passed lists
# by it and build_wheel.sh stamps a prebuilt wheel with it. Run from the repository root.
find cuda jax_fa4 tests CMakeLists.txt pyproject.toml -type f \( -name '*.py' -o -name '*.cu' \
  -o -name '*.cuh' -o -name '*.h' -o -name '*.cc' -o -name '*.txt' -o -name '*.toml' \) \
  | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -c1-16
