"""Runs benchmarks/bench_attention.py after registering jax_fa4's CUDA FFI targets under XLA's
platform name "CUDA". Stopgap while jax_fa4/_ffi.py registers them under "cuda", which XLA's GPU
client never reads; drop this once tests/gpu's test_ffi_registration_reaches_the_gpu_client passes.
Usage: python3 tests/gpu/cuda/bench_registered.py [bench_attention.py arguments]
"""

import runpy
import sys

import jax

from jax_fa4 import _ffi

for name, capsule in _ffi._jax_fa4_ext.registrations()["cuda"].items():
    jax.ffi.register_ffi_target(name, capsule, platform="CUDA")
sys.argv = ["benchmarks/bench_attention.py", *sys.argv[1:]]
runpy.run_path("benchmarks/bench_attention.py", run_name="__main__")
