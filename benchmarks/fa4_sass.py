"""Compile FlashAttention-4's SM90 forward or backward, as fa4-jax runs it, for sm_90a without a
GPU, keeping its cubin, so its SASS can be read beside ours (``benchmarks/sass_loops.py``).

Needs Python 3.12 with the peers' wheels of ``../shared/peers`` installed into one folder (the CuTe
DSL's compiler library unpacked as ``.peers/bin/env.sh`` does), plus ``typing_extensions``,
``cuda-python`` and ``jaxtyping``; no GPU and no torch (``.peers/bin/patch_fa4jax_interior_mask.py``
applied to SITE makes the forward the one the benchmarks time). The configuration is fa4-jax's own
choice (``fa4_jax.kernels``: backward 80 x 128 tiles with dQ^T at hd128 without a mask, 64 x 128
with it, 128 x 128 at hd64; forward 128 x 128 at hd128, 192 x 128 at hd64, intra-warpgroup
overlap), bf16, MHA, no variable lengths; ``--window L`` compiles the local (sliding-window) kernel.

    PYTHONPATH=SITE:SITE/nvidia_cutlass_dsl/dsl_packages python3.12 benchmarks/fa4_sass.py \\
        --pass bwd --head-dim 128 --causal --out /tmp/fa4_hd128_causal
    nvdisasm -c /tmp/fa4_hd128_causal/*.cubin > fa4.sass

The CuTe DSL writes the cubin (and PTX) into ``--out`` (``CUTE_DSL_KEEP_CUBIN``,
``CUTE_DSL_DUMP_DIR``, ``CUTE_DSL_ARCH=sm_90a``).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any


def fake_tensor(cute: Any, dtype: Any, shape: tuple, divisibility: int) -> Any:
    """A fake CuTe tensor: last dim contiguous, the other strides symbolic multiples of
    `divisibility` elements (so 16-byte TMA copies are provably aligned)."""
    stride = tuple(
        1 if i == len(shape) - 1 else cute.sym_int64(divisibility=divisibility)
        for i in range(len(shape))
    )
    align = max(1, divisibility * dtype.width // 8)
    return cute.runtime.make_fake_tensor(dtype, shape, stride=stride, assumed_align=align)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pass", dest="which", choices=("fwd", "bwd"), default="bwd")
    p.add_argument("--head-dim", type=int, choices=(64, 128), default=128)
    p.add_argument("--causal", action="store_true")
    p.add_argument("--window", action="store_true", help="the local kernel (forward only)")
    p.add_argument("--out", required=True, help="folder the cubin and PTX are written to")
    a = p.parse_args(argv)
    os.makedirs(a.out, exist_ok=True)
    os.environ.update(
        CUTE_DSL_ARCH="sm_90a",
        CUTE_DSL_KEEP_CUBIN="1",
        CUTE_DSL_KEEP_PTX="1",
        CUTE_DSL_DUMP_DIR=os.path.abspath(a.out),
    )
    import cutlass
    import cutlass.cute as cute

    d = a.head_dim
    dtype = cutlass.BFloat16
    f32 = cutlass.Float32
    b, sq, sk, h = (cute.sym_int() for _ in range(4))
    q = fake_tensor(cute, dtype, (b, sq, h, d), 8)
    k, v = (fake_tensor(cute, dtype, (b, sk, h, d), 8) for _ in range(2))
    stream = cute.runtime.make_fake_stream(use_tvm_ffi_env_stream=True)
    if a.which == "fwd":
        from fa4_jax.kernels import _get_fwd

        # A causal window is FA4's local mask alone: (left, 0).
        kernel = _get_fwd(dtype, d, d, 1, a.causal and not a.window, a.window, None, 0, 90)
        o = fake_tensor(cute, dtype, (b, sq, h, d), 8)
        lse = fake_tensor(cute, f32, (b, h, sq), 1)
        no_varlen = (None,) * 5
        window = (cutlass.Int32(4096), cutlass.Int32(0)) if a.window else (None, None)
        cute.compile(
            kernel, q, k, v, o, lse, f32(1.0 / d**0.5), *no_varlen, *window,
            stream=stream, options="--enable-tvm-ffi",
        )  # fmt: skip
        print(f"forward, causal {a.causal}, window {a.window}: cubin in {a.out}")
        return 0
    from fa4_jax.cute.flash_bwd_sm90 import FlashAttentionBackwardSm90
    from fa4_jax.kernels import _bwd_cfg_sm90, _sm90_bwd_kwargs

    cfg = _bwd_cfg_sm90(d, d, a.causal, False)
    kernel = FlashAttentionBackwardSm90(dtype, d, d, 1, **_sm90_bwd_kwargs(cfg, a.causal, False))
    sq_rounded, sq_d_rounded = cute.sym_int(), cute.sym_int()
    do = fake_tensor(cute, dtype, (b, sq, h, d), 8)
    dk, dv = (fake_tensor(cute, dtype, (b, sk, h, d), 8) for _ in range(2))
    lse_log2 = fake_tensor(cute, f32, (b, h, sq_rounded), 4)
    dpsum = fake_tensor(cute, f32, (b, h, sq_rounded), 4)
    dq_accum = fake_tensor(cute, f32, (b, h, sq_d_rounded), 4)
    no_varlen_window_semaphores = (None,) * 9
    cute.compile(
        kernel,
        q, k, v, do, lse_log2, dpsum, dq_accum, dk, dv,
        f32(1.0 / d**0.5),
        *no_varlen_window_semaphores,
        stream=stream,
        options="--enable-tvm-ffi",
    )  # fmt: skip
    print(f"tile {cfg.tile_m} x {cfg.tile_n}, dQ swapped {cfg.dQ_swapAB}: cubin in {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
