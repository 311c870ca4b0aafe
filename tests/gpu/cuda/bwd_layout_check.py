"""Host-side model of the Hopper backward kernel's data layouts and tiling (no GPU, numpy only).

Two checks, both replaying the formulas of cuda/hopper/bwd_kernel.cuh and bwd_config.cuh:

1. Layouts. Shared memory is a byte array written the way TMA writes a 128B-swizzled box and the
   way the kernel's sw128_offset() stores P^T / dS^T; every wgmma operand is read back through the
   descriptor the kernel builds (start address, LBO, SBO, K-major or MN-major canonical layout,
   the 128B swizzle applied to the address), and accumulator / A-fragment registers follow the PTX
   fragment layouts. For each head-dim config and each consumer warpgroup the emulated S^T, dP^T,
   dV, dK and dQ pieces must equal numpy's products of the right sub-blocks.
2. Tiling. The whole backward at tile level (key blocks, query-block ranges per causal key block,
   masks, the lse2 = +inf / delta' = 0 padding convention, the dlse fold, GQA loop, dQ pieces)
   against a direct float64 gradient, on shapes with ragged lengths, seq_q != seq_k and GQA.

Run: python3 tests/gpu/cuda/bwd_layout_check.py  (exits non-zero on a mismatch)
"""

from __future__ import annotations

import sys

import numpy as np

# ----------------------------------------------------------------------------------------------
# Configs (bwd_config.cuh)
# ----------------------------------------------------------------------------------------------


class Cfg:
    def __init__(self, head_dim, block_m, block_n, dq_pieces=1, split_sdp=False):
        self.D, self.BM, self.BN = head_dim, block_m, block_n
        # SplitSdP (variant 20): warpgroup 0 computes all of S^T, warpgroup 1 all of dP^T.
        self.split_sdp = split_sdp
        self.W = 2
        self.row_groups = block_n // 64
        self.col_splits = self.W // self.row_groups
        self.s_cols = block_m // self.col_splits
        self.dkv_cols = head_dim // self.col_splits
        self.pds_in_registers = self.col_splits == 1
        self.dq_row_slices = block_m // 64
        self.dq_col_slices = self.W // self.dq_row_slices
        self.dq_cols = head_dim // self.dq_col_slices
        self.dq_pieces = dq_pieces
        self.chunks = head_dim // 64
        self.chunk_bytes_q = block_m * 128
        self.chunk_bytes_kv = block_n * 128
        self.q_tile_bytes = block_m * head_dim * 2
        self.kv_tile_bytes = block_n * head_dim * 2
        self.pds_tile_bytes = block_n * block_m * 2


CONFIGS = {64: Cfg(64, 128, 128), 128: Cfg(128, 64, 128), 256: Cfg(256, 64, 64, dq_pieces=1)}
# hd256 variant 20 (DqInRing + SplitSdP): same smem map and dK/dV/dQ ownership as V4.
CFG_SPLIT = Cfg(256, 64, 64, dq_pieces=1, split_sdp=True)

# ----------------------------------------------------------------------------------------------
# Shared memory, swizzle, TMA, descriptors, fragments
# ----------------------------------------------------------------------------------------------


def swz(addr):
    """128B swizzle: the 16-byte unit (address bits 4-6) XORed with the 128-byte row (bits 7-9)."""
    return addr ^ (((addr >> 7) & 7) << 4)


class Smem:
    def __init__(self, nbytes):
        self.v = np.full(nbytes // 2, np.nan)  # one value per 2-byte element

    def put(self, byte_addr, x):
        assert byte_addr % 2 == 0
        self.v[byte_addr // 2] = x

    def get(self, byte_addr):
        x = self.v[byte_addr // 2]
        assert not np.isnan(x), f"read of unwritten shared memory at byte {byte_addr}"
        return x


def tma_load(smem, base, tile, chunk_bytes):
    """A [rows, 64*c] tile as TMA writes it: one box per 64-column chunk, 128B swizzle."""
    assert base % 1024 == 0
    rows, cols = tile.shape
    for c in range(cols // 64):
        for r in range(rows):
            for k in range(64):
                smem.put(swz(base + c * chunk_bytes + r * 128 + k * 2), tile[r, 64 * c + k])


def sw128_offset(row, col, chunk_bytes):
    """bwd_kernel.cuh sw128_offset (applied to a 1024-aligned base)."""
    c = col % 64
    return (col // 64) * chunk_bytes + row * 128 + (((c // 8) ^ (row % 8)) * 16) + (c % 8) * 2


def read_kmajor(smem, start, rows, sbo=1024):
    """Operand [rows (M or N), 16 (K)] through a K-major sw128 descriptor starting at `start`."""
    out = np.empty((rows, 16))
    for mn in range(rows):
        for k in range(16):
            out[mn, k] = smem.get(swz(start + (mn % 8) * 128 + (mn // 8) * sbo + k * 2))
    return out


def read_mnmajor(smem, start, lbo, cols, sbo=1024):
    """Operand [16 (K), cols (M or N)] through an MN-major sw128 descriptor: returns [cols, 16]."""
    out = np.empty((cols, 16))
    for mn in range(cols):
        for k in range(16):
            a = start + (mn % 64) * 2 + (mn // 64) * lbo + (k % 8) * 128 + (k // 8) * sbo
            out[mn, k] = smem.get(swz(a))
    return out


def acc_coords(tid, reg):
    """PTX wgmma D fragment: (row, col) of accumulator register `reg` of thread `tid`."""
    w, lane = tid // 32, tid % 32
    j, rem = divmod(reg, 4)
    i, e = divmod(rem, 2)
    return 16 * w + lane // 4 + 8 * i, 8 * j + 2 * (lane % 4) + e


def a_frag_coords(tid, kk, reg32, half):
    """PTX wgmma A-in-registers fragment for k-step kk: (row, k) of half `half` of 32-bit reg."""
    w, lane = tid // 32, tid % 32
    g, t = lane // 4, lane % 4
    row = 16 * w + g + (8 if reg32 in (1, 3) else 0)
    k = 16 * kk + 2 * t + half + (8 if reg32 in (2, 3) else 0)
    return row, k


def gather_acc(regs_per_thread, ncols):
    """[64, ncols] matrix from per-thread accumulator arrays (as the hardware lays them out)."""
    m = np.full((64, ncols), np.nan)
    for tid in range(128):
        for reg in range(ncols // 2):
            r, c = acc_coords(tid, reg)
            m[r, c] = regs_per_thread[tid][reg]
    assert not np.isnan(m).any()
    return m


def scatter_acc(mat):
    """Per-thread accumulator arrays holding the [64, N] matrix `mat`."""
    n = mat.shape[1]
    regs = np.empty((128, n // 2))
    for tid in range(128):
        for reg in range(n // 2):
            regs[tid, reg] = mat[acc_coords(tid, reg)]
    return regs


# ----------------------------------------------------------------------------------------------
# 1. Layouts: one step of one CTA, per warpgroup, against numpy
# ----------------------------------------------------------------------------------------------


def check_layouts(cfg: Cfg, rng) -> list[str]:
    errs = []
    D, BM, BN = cfg.D, cfg.BM, cfg.BN
    K = rng.standard_normal((BN, D))
    V = rng.standard_normal((BN, D))
    Q = rng.standard_normal((BM, D))
    dO = rng.standard_normal((BM, D))
    # Kernel smem map (offsets relative to the 1024-aligned base; stage 1 of Q/dO/pds to catch
    # stage-offset mistakes).
    k_off, v_off = 0, cfg.kv_tile_bytes
    q_off = 2 * cfg.kv_tile_bytes
    do_off = q_off + 2 * cfg.q_tile_bytes
    ds_off = do_off + 2 * cfg.q_tile_bytes
    p_off = ds_off + 2 * cfg.pds_tile_bytes
    total = p_off + 2 * cfg.pds_tile_bytes
    smem = Smem(total)
    stage = 1
    q_tile = q_off + stage * cfg.q_tile_bytes
    do_tile = do_off + stage * cfg.q_tile_bytes
    ds_tile = ds_off + stage * cfg.pds_tile_bytes
    p_tile = p_off + stage * cfg.pds_tile_bytes
    tma_load(smem, k_off, K, cfg.chunk_bytes_kv)
    tma_load(smem, v_off, V, cfg.chunk_bytes_kv)
    tma_load(smem, q_tile, Q, cfg.chunk_bytes_q)
    tma_load(smem, do_tile, dO, cfg.chunk_bytes_q)

    # S^T = K Q^T and dP^T = V dO^T per warpgroup; P^T, dS^T: any values derived from them.
    St = K @ Q.T  # [BN, BM]
    dPt = V @ dO.T
    Pt = np.tanh(St)  # stand-ins: the layout check does not care about the softmax
    dSt = Pt * dPt
    wg_regs = {}
    if cfg.split_sdp:
        errs += split_scores(cfg, smem, k_off, v_off, q_tile, do_tile, ds_tile, p_tile, St, dPt, Pt)
        wg_regs = {c: (0, c, None, None) for c in range(cfg.W)}
    for c in range(cfg.W if not cfg.split_sdp else 0):
        r, s = divmod(c, cfg.col_splits)
        ns = cfg.s_cols
        s_col0 = s * ns
        for name, x_off, y_tile, want in (
            ("S^T", k_off, q_tile, St),
            ("dP^T", v_off, do_tile, dPt),
        ):
            acc = np.zeros((64, ns))
            for kk in range(D // 16):
                chunk, within = kk // 4, (kk % 4) * 32
                a = read_kmajor(
                    smem, x_off + chunk * cfg.chunk_bytes_kv + r * 64 * 128 + within, 64
                )
                b = read_kmajor(
                    smem, y_tile + chunk * cfg.chunk_bytes_q + s_col0 * 128 + within, ns
                )
                acc += a @ b.T
            ref = want[64 * r : 64 * r + 64, s_col0 : s_col0 + ns]
            if not np.allclose(acc, ref):
                errs.append(f"hd{D} wg{c}: {name} slice wrong")
        # The warpgroup's registers of P^T and dS^T in the accumulator layout.
        pt_regs = scatter_acc(Pt[64 * r : 64 * r + 64, s_col0 : s_col0 + ns])
        dst_regs = scatter_acc(dSt[64 * r : 64 * r + 64, s_col0 : s_col0 + ns])
        wg_regs[c] = (r, s, pt_regs, dst_regs)
        # store_pds: pairs (j, i) of packed registers to the swizzled P^T / dS^T tile.
        targets = [(ds_tile, dst_regs)] + ([] if cfg.pds_in_registers else [(p_tile, pt_regs)])
        for tile, regs in targets:
            for tid in range(128):
                w, lane = tid // 32, tid % 32
                for j in range(ns // 8):
                    for i in range(2):
                        row = 64 * r + 16 * w + lane // 4 + 8 * i
                        col = s_col0 + 8 * j + 2 * (lane % 4)
                        off = tile + sw128_offset(row, col, cfg.chunk_bytes_kv)
                        smem.put(off, regs[tid, 4 * j + 2 * i])
                        smem.put(off + 2, regs[tid, 4 * j + 2 * i + 1])

    # dV += P^T dO, dK += dS^T Q, dQ = dS K, per warpgroup.
    for c in range(cfg.W):
        r, s, pt_regs, dst_regs = wg_regs[c]
        dkv_col0 = s * cfg.dkv_cols
        for name, a_regs, a_tile, y_tile, y in (
            ("dV", pt_regs, p_tile, do_tile, dO),
            ("dK", dst_regs, ds_tile, q_tile, Q),
        ):
            acc = np.zeros((64, cfg.dkv_cols))
            b_start = y_tile + (dkv_col0 // 64) * cfg.chunk_bytes_q
            for kk in range(BM // 16):
                b = read_mnmajor(smem, b_start + kk * 16 * 128, cfg.chunk_bytes_q, cfg.dkv_cols)
                if cfg.pds_in_registers:
                    # RS: A fragment = registers pf[4kk .. 4kk+3] = pairs of accumulator regs.
                    a = np.full((64, 16), np.nan)
                    for tid in range(128):
                        for reg32 in range(4):
                            k32 = 4 * kk + reg32  # pf index
                            for half in range(2):
                                row, kcol = a_frag_coords(tid, kk, reg32, half)
                                a[row, kcol - 16 * kk] = a_regs[tid, 2 * k32 + half]
                    assert not np.isnan(a).any()
                else:
                    start = a_tile + (kk // 4) * cfg.chunk_bytes_kv + r * 64 * 128 + (kk % 4) * 32
                    a = read_kmajor(smem, start, 64)
                acc += a @ b.T
            A = Pt if name == "dV" else dSt
            ref = A[64 * r : 64 * r + 64, :] @ y[:, dkv_col0 : dkv_col0 + cfg.dkv_cols]
            if not np.allclose(acc, ref):
                errs.append(f"hd{D} wg{c}: {name} wrong")
        qs, ds = c % cfg.dq_row_slices, c // cfg.dq_row_slices
        dq_col0 = ds * cfg.dq_cols
        npc = cfg.dq_cols // cfg.dq_pieces
        for piece in range(cfg.dq_pieces):
            col0 = dq_col0 + piece * npc
            acc = np.zeros((64, npc))
            a_start = ds_tile + qs * cfg.chunk_bytes_kv
            b_start = k_off + (col0 // 64) * cfg.chunk_bytes_kv
            for kk in range(BN // 16):
                a = read_mnmajor(smem, a_start + kk * 16 * 128, cfg.chunk_bytes_kv, 64)
                b = read_mnmajor(smem, b_start + kk * 16 * 128, cfg.chunk_bytes_kv, npc)
                acc += a @ b.T
            ref = dSt.T[64 * qs : 64 * qs + 64, :] @ K[:, col0 : col0 + npc]
            if not np.allclose(acc, ref):
                errs.append(f"hd{D} wg{c}: dQ piece {piece} wrong")
    # Ownership covers each output exactly once.
    cover_dkv = np.zeros((BN, D), int)
    cover_dq = np.zeros((BM, D), int)
    for c in range(cfg.W):
        r, s = divmod(c, cfg.col_splits)
        cover_dkv[64 * r : 64 * r + 64, s * cfg.dkv_cols : (s + 1) * cfg.dkv_cols] += 1
        qs, ds = c % cfg.dq_row_slices, c // cfg.dq_row_slices
        cover_dq[64 * qs : 64 * qs + 64, ds * cfg.dq_cols : (ds + 1) * cfg.dq_cols] += 1
    if not (cover_dkv == 1).all():
        errs.append(f"hd{D}: dK/dV ownership does not cover the tile once")
    if not (cover_dq == 1).all():
        errs.append(f"hd{D}: dQ ownership does not cover the tile once")
    cover_s = np.zeros((BN, BM), int)
    for c in range(cfg.W if not cfg.split_sdp else 0):
        r, s = divmod(c, cfg.col_splits)
        cover_s[64 * r : 64 * r + 64, s * cfg.s_cols : (s + 1) * cfg.s_cols] += 1
    if cfg.split_sdp:
        cover_s += 1  # warpgroup 0 computes all of S^T (warpgroup 1 all of dP^T), checked above
    if not (cover_s == 1).all():
        errs.append(f"hd{D}: S^T slices do not cover the tile once")
    return errs


def split_scores(cfg, smem, k_off, v_off, q_tile, do_tile, ds_tile, p_tile, St, dPt, Pt):
    """SplitSdP (variant 20): warpgroup 0 computes S^T over all BM query columns (one m64nBM
    chain: r = 0, col0 = 0), turns it into P^T and stores it with store_pds<Cfg, BM>(p_tile, ..,
    0, 0); warpgroup 1 computes dP^T the same way, reads P^T back with load_pds (the same
    addresses per thread and register: its accumulator layout), and stores dS^T = P^T * dP^T
    (the stand-in for P^T (dP^T - delta')) to ds_tile. Every P^T / dS^T byte written once."""
    errs = []
    D, BM = cfg.D, cfg.BM
    regs = {}
    for c, (name, x_off, y_tile, want) in enumerate(
        (("S^T", k_off, q_tile, St), ("dP^T", v_off, do_tile, dPt))
    ):
        acc = np.zeros((64, BM))
        for kk in range(D // 16):
            chunk, within = kk // 4, (kk % 4) * 32
            a = read_kmajor(smem, x_off + chunk * cfg.chunk_bytes_kv + within, 64)
            b = read_kmajor(smem, y_tile + chunk * cfg.chunk_bytes_q + within, BM)
            acc += a @ b.T
        if not np.allclose(acc, want[0:64, 0:BM]):
            errs.append(f"hd{D} split wg{c}: {name} wrong")
        regs[c] = scatter_acc(acc)

    def pds_offsets(tid, j, i):
        w, lane = tid // 32, tid % 32
        row = 16 * w + lane // 4 + 8 * i
        col = 8 * j + 2 * (lane % 4)
        return sw128_offset(row, col, cfg.chunk_bytes_kv)

    pt_regs = scatter_acc(Pt[0:64, 0:BM])
    written = {}
    for tid in range(128):
        for j in range(BM // 8):
            for i in range(2):
                off = p_tile + pds_offsets(tid, j, i)
                smem.put(off, pt_regs[tid, 4 * j + 2 * i])
                smem.put(off + 2, pt_regs[tid, 4 * j + 2 * i + 1])
                written[off] = written.get(off, 0) + 1
    if len(written) != 64 * BM // 2 or max(written.values()) != 1:
        errs.append(f"hd{D} split: P^T store does not write each pair once")
    ds_regs = np.empty_like(pt_regs)
    for tid in range(128):  # warpgroup 1: load_pds, then dS^T
        for j in range(BM // 8):
            for i in range(2):
                off = p_tile + pds_offsets(tid, j, i)
                for e in range(2):
                    p = smem.get(off + 2 * e)
                    ds_regs[tid, 4 * j + 2 * i + e] = p * regs[1][tid, 4 * j + 2 * i + e]
    if not np.allclose(gather_acc(ds_regs, BM), Pt[0:64, 0:BM] * dPt[0:64, 0:BM]):
        errs.append(f"hd{D} split: P^T read back by warpgroup 1 is not its own accumulator layout")
    for tid in range(128):
        for j in range(BM // 8):
            for i in range(2):
                off = ds_tile + pds_offsets(tid, j, i)
                smem.put(off, ds_regs[tid, 4 * j + 2 * i])
                smem.put(off + 2, ds_regs[tid, 4 * j + 2 * i + 1])
    return errs


# ----------------------------------------------------------------------------------------------
# 2. Tiling: the whole backward at tile level
# ----------------------------------------------------------------------------------------------


def reference_grads(q, k, v, do, dlse, scale, causal):
    b, sq, hq, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    grp = hq // hkv
    dq, dk, dv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
    o = np.zeros_like(q)
    lse = np.full((b, hq, sq), -np.inf)
    for bb in range(b):
        for h in range(hq):
            kh = h // grp
            s = scale * q[bb, :, h] @ k[bb, :, kh].T
            if causal:
                rows, cols = np.arange(sq)[:, None], np.arange(sk)[None, :]
                s = np.where(cols <= rows + sk - sq, s, -np.inf)
            m = s.max(axis=1, keepdims=True)
            seen = np.isfinite(m[:, 0])
            m = np.where(np.isfinite(m), m, 0)
            p = np.exp(s - m)
            den = p.sum(1, keepdims=True)
            den = np.where(den > 0, den, 1)
            p = p / den
            o[bb, :, h] = p @ v[bb, :, kh]
            lse[bb, h] = np.where(seen, np.log(den[:, 0]) + m[:, 0], -np.inf)
            dp = do[bb, :, h] @ v[bb, :, kh].T
            delta = (do[bb, :, h] * o[bb, :, h]).sum(1)
            ds = p * (dp - delta[:, None] + np.where(seen, dlse[bb, h], 0)[:, None])
            dq[bb, :, h] = scale * ds @ k[bb, :, kh]
            dk[bb, :, kh] += scale * ds.T @ q[bb, :, h]
            dv[bb, :, kh] += p.T @ do[bb, :, h]
    return o, lse, dq, dk, dv


def tiled_backward(cfg: Cfg, q, k, v, o, lse, do, dlse, scale, causal):
    """bwd_preprocess + bwd_kernel + bwd_postprocess at tile level, with the kernel's index math."""
    b, sq, hq, D = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    grp = hq // hkv
    BM, BN = cfg.BM, cfg.BN
    pad = (sq + 127) // 128 * 128
    log2e = 1.4426950408889634
    # Preprocess (lse2, delta', padded).
    lse2 = np.full((b, hq, pad), np.inf)
    delta = np.zeros((b, hq, pad))
    for bb in range(b):
        for h in range(hq):
            for i in range(sq):
                if lse[bb, h, i] != -np.inf:
                    lse2[bb, h, i] = lse[bb, h, i] * log2e
                    delta[bb, h, i] = (o[bb, i, h] * do[bb, i, h]).sum() - dlse[bb, h, i]
    dq_acc = np.zeros((b, hq, pad, D))
    dk = np.zeros_like(k)
    dv = np.zeros_like(v)
    # TMA zero-fill: pad the sequence axes of the operands.
    qp = np.zeros((b, pad + BM, hq, D))
    qp[:, :sq] = q
    dop = np.zeros_like(qp)
    dop[:, :sq] = do
    nblocks = (sk + BN - 1) // BN
    kp = np.zeros((b, nblocks * BN, hkv, D))
    kp[:, :sk] = k
    vp = np.zeros_like(kp)
    vp[:, :sk] = v
    for bb in range(b):
        for kh in range(hkv):
            for nb in range(nblocks):
                n0 = nb * BN
                m_end = (sq + BM - 1) // BM
                m_begin = max(0, n0 - (sk - sq)) // BM if causal else 0
                Kt, Vt = kp[bb, n0 : n0 + BN, kh], vp[bb, n0 : n0 + BN, kh]
                dk_t = np.zeros((BN, D))
                dv_t = np.zeros((BN, D))
                for g in range(grp):
                    h = kh * grp + g
                    for m in range(m_begin, m_end):
                        m0 = m * BM
                        Qt, dOt = qp[bb, m0 : m0 + BM, h], dop[bb, m0 : m0 + BM, h]
                        St = Kt @ Qt.T
                        Pt = np.exp2(St * scale * log2e - lse2[bb, h, m0 : m0 + BM][None, :])
                        need_mask = n0 + BN > sk or (causal and n0 + BN - 1 > m0 + sk - sq)
                        if need_mask:
                            key = n0 + np.arange(BN)[:, None]
                            query = m0 + np.arange(BM)[None, :]
                            masked = (key >= sk) | np.zeros((1, BM), bool)
                            if causal:
                                masked |= key > query + sk - sq
                            Pt = np.where(masked, 0.0, Pt)
                        dPt = Vt @ dOt.T
                        dSt = Pt * (dPt - delta[bb, h, m0 : m0 + BM][None, :])
                        dv_t += Pt @ dOt
                        dk_t += dSt @ Qt
                        dq_acc[bb, h, m0 : m0 + BM] += dSt.T @ Kt
                        # Skipped blocks (m < m_begin) must be fully masked.
                    for m in range(0, m_begin):
                        m0 = m * BM
                        key = n0 + np.arange(BN)[:, None]
                        query = m0 + np.arange(BM)[None, :]
                        vis = (key < sk) & (key <= query + sk - sq) & (query < sq)
                        assert not vis.any(), "a skipped query block sees a key of the block"
                rows = min(BN, sk - n0)
                dk[bb, n0 : n0 + rows, kh] = scale * dk_t[:rows]
                dv[bb, n0 : n0 + rows, kh] = dv_t[:rows]
    dq = scale * np.transpose(dq_acc[:, :, :sq], (0, 2, 1, 3))
    return dq, dk, dv


def check_tiling(cfg: Cfg, rng) -> list[str]:
    errs = []
    shapes = [
        (1, 1, 1, 1, 1),
        (2, 17, 130, 2, 1),
        (1, 130, 17, 4, 2),
        (1, 200, 333, 2, 2),
        (1, 129, 129, 2, 1),
    ]
    for shape in shapes:
        for causal in (False, True):
            b, sq, sk, hq, hkv = shape
            D = cfg.D
            q = rng.standard_normal((b, sq, hq, D))
            k = rng.standard_normal((b, sk, hkv, D))
            v = rng.standard_normal((b, sk, hkv, D))
            do = rng.standard_normal((b, sq, hq, D))
            dlse = rng.standard_normal((b, hq, sq))
            scale = 1 / np.sqrt(D)
            o, lse, rdq, rdk, rdv = reference_grads(q, k, v, do, dlse, scale, causal)
            with np.errstate(over="ignore"):
                dq, dk, dv = tiled_backward(cfg, q, k, v, o, lse, do, dlse, scale, causal)
            for name, got, ref in (("dq", dq, rdq), ("dk", dk, rdk), ("dv", dv, rdv)):
                if not np.allclose(got, ref, atol=1e-9, rtol=1e-7):
                    errs.append(
                        f"hd{D} {shape} causal={causal}: {name} "
                        f"max err {np.abs(got - ref).max():.3e}"
                    )
    return errs


# ----------------------------------------------------------------------------------------------
# 3. DqViaTma: the fragment-order dQ tile (bwd_config.cuh dq_frag_offset / dq_accum_offset)
# ----------------------------------------------------------------------------------------------


def dq_frag_offset(cfg: Cfg, c, t, k):
    return c * 64 * cfg.dq_cols + 2 * ((k // 2) * 128 + t) + k % 2


def dq_accum_offset(cfg: Cfg, row, col):
    qs, ds = row // 64, col // cfg.dq_cols
    c = qs + ds * cfg.dq_row_slices
    rin, cin = row % 64, col % cfg.dq_cols
    t = 32 * (rin // 16) + 4 * (rin % 8)
    k = 4 * (cin // 8) + 2 * ((rin % 16) // 8)
    return dq_frag_offset(cfg, c, t, k)


def check_dq_tile(cfg: Cfg) -> list[str]:
    """The consumers' stores (stage_dq_tile: warpgroup c = (qs, ds) split of bwd_consumer, thread
    t, register k of the dQ accumulator) fill the block_m x head_dim float tile exactly once, a
    warp's float2 stores are 256 contiguous bytes, and the postprocess (dq_accum_offset of each
    8-column group, read as 8 contiguous floats) gets back dQ[row, col] for every element."""
    errs = []
    if cfg.dq_pieces != 1 or cfg.D == 256:
        return errs
    BM, D = cfg.BM, cfg.D
    dq = np.arange(BM * D, dtype=np.float64).reshape(BM, D) + 0.5
    tile = np.full(BM * D, np.nan)
    written = np.zeros(BM * D, dtype=int)
    for c in range(cfg.W):
        qs, ds = c % cfg.dq_row_slices, c // cfg.dq_row_slices
        piece = dq[64 * qs : 64 * qs + 64, ds * cfg.dq_cols : (ds + 1) * cfg.dq_cols]
        regs = scatter_acc(piece)
        for t in range(128):
            for u in range(cfg.dq_cols // 4):
                off = dq_frag_offset(cfg, c, t, 2 * u)
                # the kernel: base = dq_frag_offset(c, tid, 0), then + 256 floats per pair
                if off != dq_frag_offset(cfg, c, t, 0) + 256 * u or off % 2:
                    errs.append(f"hd{D}: store address of c={c} t={t} u={u}")
                for e in range(2):
                    tile[off + e] = regs[t, 2 * u + e]
                    written[off + e] += 1
        for w in range(4):
            for u in range(cfg.dq_cols // 4):
                offs = [dq_frag_offset(cfg, c, 32 * w + ln, 2 * u) for ln in range(32)]
                if offs != list(range(offs[0], offs[0] + 64, 2)):
                    errs.append(f"hd{D}: warp {w} pair {u} of c={c} not 256 contiguous bytes")
    if (written != 1).any():
        errs.append(f"hd{D}: dQ tile elements written {written.min()}..{written.max()} times")
    for row in range(BM):
        for col in range(0, D, 8):
            o = dq_accum_offset(cfg, row, col)
            if not np.array_equal(tile[o : o + 8], dq[row, col : col + 8]):
                errs.append(f"hd{D}: postprocess read of row {row} cols {col}..{col + 7}")
    if cfg.BM * cfg.D * 4 % 16:
        errs.append(f"hd{D}: tile bytes not a multiple of 16")
    return errs[:10]


# ---------------------------------------------------------------------------------------------
# Deterministic mode's dQ order (bwd_kernel.cuh: bwd_m_range, bwd_key_block, bwd_dq_rank)


def _m_range(n0, sq, sk, bm, causal):
    m_end = (sq + bm - 1) // bm
    return (max(0, n0 - (sk - sq)) // bm if causal else 0), m_end


def _dq_rank(n, m, sq, sk, bm, bn, nblocks, causal):
    if not causal:
        return n
    x = (m + 1) * bm + sk - sq
    assert x >= 1
    return min(nblocks - 1, (x - 1) // bn) - n


def simulate_dq_order(heads, sq, sk, bm, bn, causal, slots):
    """Replays the semaphore protocol: CTAs dispatched in blockIdx order, `slots` resident at a
    time, each doing one (query block) step per tick when its semaphore allows. Returns the ticks,
    or raises on a deadlock or on ranks that are not a permutation of the visitors."""
    nb = (sk + bn - 1) // bn
    ctas = []
    for h in range(heads):
        for b in range(nb):
            n = nb - 1 - b if causal else b  # bwd_key_block in deterministic mode
            mb, me = _m_range(n * bn, sq, sk, bm, causal)
            ctas.append((h, n, list(range(mb, me))))
    visitors = {}
    for h, n, steps in ctas:
        for m in steps:
            visitors.setdefault((h, m), []).append(_dq_rank(n, m, sq, sk, bm, bn, nb, causal))
    for key, ranks in visitors.items():
        assert sorted(ranks) == list(range(len(ranks))), (sq, sk, bm, bn, causal, key, ranks)
    sem, pos, resident, nxt, ticks = {}, [0] * len(ctas), [], 0, 0
    while nxt < len(ctas) or resident:
        while len(resident) < slots and nxt < len(ctas):
            resident.append(nxt)
            nxt += 1
        moved = False
        for i in list(resident):
            h, n, steps = ctas[i]
            if pos[i] == len(steps):
                resident.remove(i)
                moved = True
                continue
            m = steps[pos[i]]
            r = _dq_rank(n, m, sq, sk, bm, bn, nb, causal)
            if sem.get((h, m), 0) == r:
                sem[(h, m)] = r + 1
                pos[i] += 1
                moved = True
        ticks += 1
        assert moved, f"deadlock: sq {sq} sk {sk} bm {bm} bn {bn} causal {causal} slots {slots}"
    return ticks


def check_dq_order():
    errs = []
    rng = np.random.default_rng(1)
    for _ in range(1500):
        bm, bn = [(64, 128), (128, 128), (64, 64)][rng.integers(3)]
        sq, sk = int(rng.integers(1, 1500)), int(rng.integers(1, 1500))
        causal = bool(rng.random() < 0.7)
        try:
            simulate_dq_order(
                int(rng.integers(1, 3)), sq, sk, bm, bn, causal, int(rng.choice([1, 3, 132]))
            )
        except AssertionError as e:
            errs.append(f"dq order: {e}")
            break
    return errs


def check_dq_ring(cfg: Cfg) -> list[str]:
    """DqInRing (hd256, bwd v3): stage_dq_ring puts register pair u of thread t of warpgroup c at
    byte c * R + 1024 (u % P) + 8 t of the step's Q stage (u < P) or dO stage (u >= P), R = the
    ring region (q_tile_bytes / 2), P = dq_cols / 8 pairs per region. Checks: every byte of both
    stages written exactly once; warpgroup c writes only the head-dim chunks its own dK (Q) / dV
    (dO)
    wgmmas read after the P^T/dS^T barrier (dkv columns [c * dkv_cols, ...)), never the other's;
    warp stores are 256 contiguous bytes; the writer's four bulk adds (Q region c -> float
    64 * dq_cols * c, dO region c -> + R / 4) rebuild exactly the fragment-order tile of
    dq_frag_offset, and the postprocess (dq_accum_offset) reads dQ[row, col] back."""
    errs = []
    if cfg.D != 256:
        return errs
    BM, D = cfg.BM, cfg.D
    R = cfg.q_tile_bytes // cfg.col_splits
    P = cfg.dq_cols // 8
    if 64 * cfg.dq_cols * 4 != 2 * R or P * 1024 != R:
        errs.append("hd256: dQ piece is not a Q half + a dO half")
        return errs
    dq = np.arange(BM * D, dtype=np.float64).reshape(BM, D) + 0.5
    stages = {
        "q": np.full(cfg.q_tile_bytes // 4, np.nan),
        "do": np.full(cfg.q_tile_bytes // 4, np.nan),
    }
    written = {k: np.zeros(cfg.q_tile_bytes // 4, dtype=int) for k in stages}
    for c in range(cfg.W):
        qs, ds = c % cfg.dq_row_slices, c // cfg.dq_row_slices
        if qs != 0 or ds != c or c % cfg.col_splits != c:
            errs.append("hd256: ownership is not (r=0, s=c, dq slice c)")
        piece = dq[64 * qs : 64 * qs + 64, ds * cfg.dq_cols : (ds + 1) * cfg.dq_cols]
        regs = scatter_acc(piece)
        # bytes c's dK reads of Q (and dV of dO):
        # chunks [c * dkv_cols / 64, (c + 1) * dkv_cols / 64)
        own = set()
        for ch in range(c * cfg.dkv_cols // 64, (c + 1) * cfg.dkv_cols // 64):
            own.update(range(ch * cfg.chunk_bytes_q, (ch + 1) * cfg.chunk_bytes_q))
        for t in range(128):
            for u in range(2 * P):
                which = "q" if u < P else "do"
                byte = c * R + 1024 * (u % P) + 8 * t
                if byte not in own or byte + 7 not in own:
                    errs.append(f"hd256: c={c} t={t} u={u} writes outside its own {which} chunks")
                for e in range(2):
                    stages[which][byte // 4 + e] = regs[t, 2 * u + e]
                    written[which][byte // 4 + e] += 1
        for w in range(4):
            for u in range(2 * P):
                bytes_ = [c * R + 1024 * (u % P) + 8 * (32 * w + ln) for ln in range(32)]
                if bytes_ != list(range(bytes_[0], bytes_[0] + 256, 8)):
                    errs.append(f"hd256: warp {w} pair {u} of c={c} not 256 contiguous bytes")
    for k in stages:
        if (written[k] != 1).any():
            errs.append(
                f"hd256: {k} stage bytes written {written[k].min()}..{written[k].max()} times"
            )
    tile = np.zeros(BM * D)
    for c in range(cfg.W):
        base = 64 * cfg.dq_cols * c
        tile[base : base + R // 4] += stages["q"][c * R // 4 : (c + 1) * R // 4]
        tile[base + R // 4 : base + R // 2] += stages["do"][c * R // 4 : (c + 1) * R // 4]
    ref = np.full(BM * D, np.nan)
    for c in range(cfg.W):
        regs = scatter_acc(dq[:, c * cfg.dq_cols : (c + 1) * cfg.dq_cols])
        for t in range(128):
            for k in range(cfg.dq_cols // 2):
                ref[dq_frag_offset(cfg, c, t, k)] = regs[t, k]
    if not np.array_equal(tile, ref):
        errs.append("hd256: the bulk adds do not rebuild the fragment-order tile")
    for row in range(BM):
        for col in range(0, D, 8):
            o = dq_accum_offset(cfg, row, col)
            if not np.array_equal(tile[o : o + 8], dq[row, col : col + 8]):
                errs.append(f"hd256: postprocess read of row {row} cols {col}..{col + 7}")
    return errs[:10]


def main():
    rng = np.random.default_rng(0)
    errs = []
    for d, cfg in CONFIGS.items():
        e1 = check_layouts(cfg, rng)
        print(f"hd{d}: layouts {'ok' if not e1 else 'FAIL'}")
        e2 = check_tiling(cfg, rng)
        print(f"hd{d}: tiling {'ok' if not e2 else 'FAIL'}")
        e3 = check_dq_tile(cfg)
        na = " (n/a)" if d == 256 else ""
        print(f"hd{d}: DqViaTma fragment-order dQ tile {'ok' if not e3 else 'FAIL'}" + na)
        e5 = check_dq_ring(cfg)
        if d == 256:
            print(f"hd{d}: DqInRing dQ pieces in the Q/dO ring stages {'ok' if not e5 else 'FAIL'}")
        errs += e1 + e2 + e3 + e5
    e6 = check_layouts(CFG_SPLIT, rng)
    print(f"hd256 SplitSdP (variant 20): layouts {'ok' if not e6 else 'FAIL'}")
    errs += e6
    e4 = check_dq_order()
    verdict = "ok" if not e4 else "FAIL"
    print(f"deterministic dQ order (ranks, no deadlock, 1500 random shapes) {verdict}")
    errs += e4
    for e in errs:
        print("  ", e)
    return 1 if errs else 0


if __name__ == "__main__":
    sys.exit(main())
