"""tests/gpu check the Hopper variant backward, which the library refuses on the GPU until it has
passed this validation (jax_fa4/lowering.py, GPU_VARIANT_BACKWARD_ENV): enable it here."""

import os

os.environ["JAX_FA4_GPU_VARIANT_BACKWARD"] = "1"
