"""The persistent causal forward kernel's tile order, chosen on the host
(cuda/hopper/fwd/schedule_model.h).

The kernel deals the longest-first (Lpt) order in sections of (head, batch) pairs boustrophedon
over its CTAs; the launcher picks the section size whose K/V fits in L2 and whose busiest CTA the
cost model (key blocks + a fixed per-tile overhead) loads least. These tests re-derive that deal in
Python and check the extension's choice against an exhaustive search.
"""

from __future__ import annotations

import pytest

from jax_fa4 import _ffi
from jax_fa4._ffi import _jax_fa4_ext

pytestmark = pytest.mark.skipif(
    not _ffi.built_with_cuda(), reason="this build has no CUDA kernels (no nvcc at install)"
)

L2_BYTES = 24 << 20  # kFwdSectionL2Bytes
OVERHEAD = 3  # kFwdTileOverheadHalfBlocks


def _key_blocks(m0: int, block_m: int, block_n: int, seq_q: int, seq_k: int) -> int:
    """Key blocks a causal (bottom-right aligned) query tile needs."""
    total = -(-seq_k // block_n)
    max_col = min(m0 + block_m, seq_q) - 1 + seq_k - seq_q
    return 0 if max_col < 0 else min(total, max_col // block_n + 1)


def _busiest(seq_q, seq_k, pairs, block_m, block_n, ctas, section) -> int:
    """The busiest CTA's cost (half key blocks) under the kernel's deal, written independently."""
    m_blocks = -(-seq_q // block_m)
    cost = [
        2 * _key_blocks(m * block_m, block_m, block_n, seq_q, seq_k) + OVERHEAD
        for m in range(m_blocks)
    ]
    order = []  # m block of each linear tile: sections of `section` pairs, longest m block first
    for start in range(0, pairs, section):
        n = min(section, pairs - start)
        for m in reversed(range(m_blocks)):
            order += [m] * n
    per_cta = [0] * ctas
    for t, m in enumerate(order):
        r, i = divmod(t, ctas)
        per_cta[ctas - 1 - i if r % 2 else i] += cost[m]
    return max(per_cta)


# seq_q, seq_k, pairs, kv bytes per pair, block_m, block_n, ctas: the hd64 benchmark cells (2k, 4k:
# batch 8 / 4 x 32 heads), a GQA group of 4, seq_q != seq_k, a grid capped at 3 CTAs, few pairs.
SHAPES = [
    (2048, 2048, 256, 2048 * 64 * 4, 192, 128, 132),
    (4096, 4096, 128, 4096 * 64 * 4, 192, 128, 132),
    (1000, 3000, 96, 3000 * 64 * 4 // 4, 192, 128, 132),
    (3000, 1000, 40, 1000 * 64 * 4, 192, 128, 132),
    (777, 777, 12, 777 * 64 * 4, 192, 128, 3),
    (2048, 2048, 5, 2048 * 64 * 4, 192, 128, 132),
]


@pytest.mark.parametrize("shape", SHAPES)
def test_section_is_the_best_that_fits_l2(shape):
    seq_q, seq_k, pairs, kv, bm, bn, ctas = shape
    section, busiest = _jax_fa4_ext.cuda_fwd_persistent_section(*shape)
    fit = min(pairs, L2_BYTES // kv)
    assert 1 <= section <= fit
    assert busiest == _busiest(seq_q, seq_k, pairs, bm, bn, ctas, section)
    best = min(_busiest(seq_q, seq_k, pairs, bm, bn, ctas, s) for s in range(1, fit + 1))
    assert busiest == best


def test_hd64_2k_is_balanced_and_l2_sized():
    """Why sections: one section over all 256 pairs reads every tile's K/V from DRAM and loads
    its busiest CTA 3% above the mean; the chosen sections fit L2 and stay within 1%."""
    seq, pairs, bm, bn, ctas = 2048, 256, 192, 128, 132
    section, busiest = _jax_fa4_ext.cuda_fwd_persistent_section(
        seq, seq, pairs, seq * 64 * 4, bm, bn, ctas
    )
    m_blocks = -(-seq // bm)
    per_pair = sum(2 * _key_blocks(m * bm, bm, bn, seq, seq) + OVERHEAD for m in range(m_blocks))
    mean = per_pair * pairs / ctas
    assert section * seq * 64 * 4 <= L2_BYTES
    assert busiest / mean < 1.01
    assert _busiest(seq, seq, pairs, bm, bn, ctas, pairs) / mean > 1.02


def test_a_pair_too_large_for_l2_gets_one_section():
    seq = 1 << 20  # 512 MB of K/V per pair at hd64
    section, _ = _jax_fa4_ext.cuda_fwd_persistent_section(8, seq, 4, seq * 64 * 4, 192, 128, 132)
    assert section == 4


@pytest.mark.parametrize("bad", [dict(pairs=0), dict(ctas=0), dict(block_m=0), dict(seq_q=-1)])
def test_bad_sizes_raise(bad):
    args = dict(seq_q=64, seq_k=64, pairs=2, kv_bytes_per_pair=1024, block_m=192, block_n=128)
    args["ctas"] = 4
    args.update(bad)
    with pytest.raises(ValueError, match="cuda_fwd_persistent_section"):
        _jax_fa4_ext.cuda_fwd_persistent_section(**args)


def test_scoring_budget_caps_host_time():
    """A huge grid (a million tiles) gets a valid section without scoring every candidate."""
    pairs = 1 << 16
    section, busiest = _jax_fa4_ext.cuda_fwd_persistent_section(
        4096, 4096, pairs, 4096 * 64 * 4, 192, 128, 132
    )
    assert 1 <= section <= pairs and busiest > 0
