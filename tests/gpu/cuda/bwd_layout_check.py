"""Host-side model of the Hopper backward kernels' data layouts and tiling (no GPU, numpy only).

Replays the formulas of cuda/hopper/bwd/ (config.cuh: the named configurations and their
shared-memory maps; mainloop.cuh and kernel_kv80.cuh: the wgmma operands and the P^T / dS^T
stores; dq_writer.cuh and prepost.cuh: dq_accum's fragment order; scheduler.cuh: the query
blocks of a key block) for the shipped configurations: BwdHd64 (128 x 128 blocks), BwdHd128
(64 x 128; BwdHd128Persistent has the same tile and layouts), BwdHd128Rows80 (80 x 128 without a
mask: dQ^T = K^T dS^T from a query-major dS tile) and BwdHd256 (64 x 80, the transposed products
of kernel_kv80.cuh).

1. Layouts. Shared memory is a byte array written the way TMA writes a 128B-swizzled box and the
   way the kernels' sw128_offset() / stmatrix (.trans) stores write P^T / dS^T; every wgmma operand
   is read back through the descriptor the kernel builds (start address, LBO, SBO, K-major or
   MN-major canonical layout, the 128B swizzle applied to the address), and accumulator /
   A-fragment registers follow the PTX fragment layouts. For each configuration and consumer
   warpgroup the emulated S^T / dP^T (hd256: S / dP), dV, dK and dQ pieces must equal numpy's
   products of the right sub-blocks. The 64-row tiles also: K's register fragments for S^T
   (load_a_frags' ldmatrix addresses) are the wgmma A fragments of its first four k-steps.
2. Tiling. The whole backward at tile level (key blocks, query-block ranges per causal key block,
   masks, the lse2 = +inf / delta' = 0 padding convention, the dlse fold, GQA loop) against a
   direct float64 gradient, on shapes with ragged lengths, seq_q != seq_k and GQA.
3. dq_accum. hd64 / hd128: the consumers' stage_dq_tile stores fill the float32 tile that the
   writer adds with one bulk reduce in fragment order (dq_frag_offset), and the postprocess reads
   it back (dq_accum_offset). hd256: the consumers' 16-byte red.global adds (kv80_add_dq) fill the
   tile's four transposed pieces once, and dq_accum_offset_any reads it back. hd256 also: the dK /
   dV epilogue's transposed stmatrix staging (rows padded to 528 bytes) holds dK / dV row-major and
   each stmatrix writes 8 distinct 16-byte bank groups.
4. Deterministic mode's dQ order (dq_writer.cuh bwd_dq_rank, scheduler.cuh's key blocks
   last-first under the causal mask): the ranks of the key blocks visiting each query block are a
   permutation, and the semaphore protocol cannot deadlock, for the shipped block shapes.

Run: python3 tests/gpu/cuda/bwd_layout_check.py  (exits non-zero on a mismatch)
"""

from __future__ import annotations

import sys

import numpy as np

# ----------------------------------------------------------------------------------------------
# Configurations (config.cuh)
# ----------------------------------------------------------------------------------------------


class Cfg:
    """BwdTile<HeadDim, BlockM, BlockN>: two consumer warpgroups; S^T / dP^T and dK / dV split by
    64-key row groups (block_n == 128: row_groups 2, col_splits 1, P^T / dS^T stay in registers),
    dQ by 64-query row slices x head-dim column slices."""

    def __init__(self, name, head_dim, block_m, block_n):
        self.name, self.D, self.BM, self.BN = name, head_dim, block_m, block_n
        self.W = 2
        self.row_groups = block_n // 64
        self.col_splits = self.W // self.row_groups
        assert self.col_splits == 1, "BwdTile: block_n == 128"
        self.s_cols = block_m // self.col_splits
        self.dkv_cols = head_dim // self.col_splits
        # block_m 80 (dq_transposed): warpgroup c takes dQ^T's head-dim rows [64c, 64c + 64).
        self.dq_transposed = block_m == 80
        self.dq_row_slices = block_m // 64
        self.dq_col_slices = self.W // self.dq_row_slices
        self.dq_cols = head_dim // self.dq_col_slices
        self.chunks = head_dim // 64
        self.chunk_bytes_q = block_m * 128
        self.chunk_bytes_kv = block_n * 128
        self.q_tile_bytes = block_m * head_dim * 2
        self.kv_tile_bytes = block_n * head_dim * 2
        self.pds_tile_bytes = block_n * block_m * 2
        # The shared-memory map (q_stages = pds_stages = 2).
        self.k_off = 0
        self.v_off = self.kv_tile_bytes
        self.q_off = 2 * self.kv_tile_bytes
        self.do_off = self.q_off + 2 * self.q_tile_bytes
        self.ds_off = self.do_off + 2 * self.q_tile_bytes
        self.dq_off = self.ds_off + 2 * self.pds_tile_bytes
        self.smem_bytes = self.dq_off + block_m * head_dim * 4
        # dQ accumulator registers a thread (config.cuh dq_regs) and a warpgroup's piece.
        self.dq_regs = (block_m if self.dq_transposed else self.dq_cols) // 2
        self.dq_piece_floats = 128 * self.dq_regs


class CfgKv80:
    """BwdTileKv80<256> (BwdHd256): 64 queries x 80 keys, 40 keys per warpgroup for S / dP,
    head-dim rows 128c .. 128c + 127 per warpgroup for dK^T / dV^T / dQ^T."""

    name, D, BM, BN = "BwdHd256", 256, 64, 80
    chunk_bytes_q = 64 * 128
    chunk_bytes_kv = 80 * 128
    q_tile_bytes = 64 * 256 * 2
    kv_tile_bytes = 80 * 256 * 2
    pds_tile_bytes = 80 * 64 * 2
    k_off = 0
    v_off = kv_tile_bytes
    q_off = 2 * kv_tile_bytes
    do_off = q_off + 2 * q_tile_bytes
    pt_off = do_off + q_tile_bytes
    dst_off = pt_off + 2 * pds_tile_bytes
    lse_off = dst_off + 2 * pds_tile_bytes
    epi_row_bytes = 256 * 2 + 16


CONFIGS = [
    Cfg("BwdHd64", 64, 128, 128),
    Cfg("BwdHd128", 128, 64, 128),
    Cfg("BwdHd128Rows80", 128, 80, 128),
]
KV80 = CfgKv80()

# ----------------------------------------------------------------------------------------------
# Shared memory, swizzle, TMA, descriptors, fragments
# ----------------------------------------------------------------------------------------------


def swz(addr):
    """128B swizzle: the 16-byte unit (address bits 4-6) XORed with the 128-byte row (bits 7-9)."""
    return addr ^ (((addr >> 7) & 7) << 4)


class Smem:
    def __init__(self, nbytes):
        self.v = np.full(nbytes // 2, np.nan)  # one value per 2-byte element
        self.writes = np.zeros(nbytes // 2, dtype=int)

    def put(self, byte_addr, x):
        assert byte_addr % 2 == 0
        self.v[byte_addr // 2] = x
        self.writes[byte_addr // 2] += 1

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
    """common/numeric.cuh sw128_offset (applied to a 1024-aligned base)."""
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


def scatter_acc(mat):
    """Per-thread accumulator arrays holding the [64, N] matrix `mat`."""
    n = mat.shape[1]
    regs = np.empty((128, n // 2))
    for tid in range(128):
        for reg in range(n // 2):
            regs[tid, reg] = mat[acc_coords(tid, reg)]
    return regs


def ldmatrix_x4(smem, row_addr, lane):
    """ldmatrix .m8n8 .x4 (not transposed) of one warp, lane `lane`'s four registers: row_addr[l]
    = the address lane l supplies (row l % 8 of matrix l / 8); register m gets matrix m's row
    lane / 4, columns 2 (lane % 4) + e (e = 0, 1)."""
    return [
        [smem.get(row_addr[8 * m + lane // 4] + 2 * (2 * (lane % 4) + e)) for e in range(2)]
        for m in range(4)
    ]


def stmatrix_trans(smem, row_addr, frags):
    """stmatrix .m8n8 .trans of one warp: frags[m][lane] = the (2 values of the) 32-bit register
    of matrix m in lane `lane` (fragment row lane / 4, columns 2 (lane % 4) + e); row_addr[l] =
    the address lane l supplies (row l % 8 of stored matrix l / 8). Stored row r of matrix m =
    fragment column r. Returns the row addresses of each matrix (for the bank check)."""
    for m, frag in enumerate(frags):
        for lane in range(32):
            for e in range(2):
                row, col = lane // 4, 2 * (lane % 4) + e
                smem.put(row_addr[8 * m + col] + 2 * row, frag[lane][e])
    return [row_addr[8 * m : 8 * m + 8] for m in range(len(frags))]


# ----------------------------------------------------------------------------------------------
# 1. Layouts: one step of one CTA, per warpgroup, against numpy
# ----------------------------------------------------------------------------------------------


def check_layouts(cfg: Cfg, rng) -> list[str]:
    """mainloop.cuh: issue_transposed_scores (S^T = K Q^T, dP^T = V dO^T), bwd_p_ds's registers as
    the A operand of issue_dkv_rs (dV += P^T dO, dK += dS^T Q), store_pds (dS^T to its buffer) and
    issue_dq (dQ = dS K)."""
    errs = []
    D, BM, BN = cfg.D, cfg.BM, cfg.BN
    K = rng.standard_normal((BN, D))
    V = rng.standard_normal((BN, D))
    Q = rng.standard_normal((BM, D))
    dO = rng.standard_normal((BM, D))
    for off in (cfg.k_off, cfg.v_off, cfg.q_off, cfg.do_off, cfg.ds_off, cfg.dq_off):
        if off % 1024:
            errs.append(f"{cfg.name}: a tile offset is not 1024-aligned")
    if cfg.smem_bytes > 232448:
        errs.append(f"{cfg.name}: shared memory over 227 KB")
    smem = Smem(cfg.dq_off)
    stage = 1  # stage 1 of Q / dO / dS^T, to catch stage-offset mistakes
    q_tile = cfg.q_off + stage * cfg.q_tile_bytes
    do_tile = cfg.do_off + stage * cfg.q_tile_bytes
    ds_tile = cfg.ds_off + stage * cfg.pds_tile_bytes
    tma_load(smem, cfg.k_off, K, cfg.chunk_bytes_kv)
    tma_load(smem, cfg.v_off, V, cfg.chunk_bytes_kv)
    tma_load(smem, q_tile, Q, cfg.chunk_bytes_q)
    tma_load(smem, do_tile, dO, cfg.chunk_bytes_q)

    # S^T = K Q^T and dP^T = V dO^T per warpgroup; P^T, dS^T: any values derived from them.
    St = K @ Q.T  # [BN, BM]
    dPt = V @ dO.T
    Pt = np.tanh(St)  # stand-ins: the layout check does not care about the softmax
    dSt = Pt * dPt
    wg_regs = {}
    for c in range(cfg.W):
        r, s = divmod(c, cfg.col_splits)
        ns = cfg.s_cols
        s_col0 = s * ns
        for name, x_off, y_tile, want in (
            ("S^T", cfg.k_off, q_tile, St),
            ("dP^T", cfg.v_off, do_tile, dPt),
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
                errs.append(f"{cfg.name} wg{c}: {name} slice wrong")
        if not cfg.dq_transposed:
            # load_a_frags (BwdTile::k_in_registers): K's rows [64r, 64r + 64), head-dim columns
            # [0, 64) by one ldmatrix x4 per k16 step (lane l: row 64 r + 16 w + l % 8 + 8 (m % 2),
            # columns 16 kk + 8 (m / 2), m = l / 8); register 4 kk + u must be register u of the
            # wgmma A fragment of step kk (S^T's first four k-steps from registers).
            bad = 0
            for w in range(4):
                for kk in range(4):
                    row_addr = []
                    for ln in range(32):
                        m = ln // 8
                        row = 64 * r + 16 * w + ln % 8 + 8 * (m % 2)
                        col = 16 * kk + 8 * (m // 2)
                        row_addr.append(cfg.k_off + sw128_offset(row, col, cfg.chunk_bytes_kv))
                    for ln in range(32):
                        regs = ldmatrix_x4(smem, row_addr, ln)
                        for u in range(4):
                            for h in range(2):
                                row, k = a_frag_coords(32 * w + ln, kk, u, h)
                                bad += regs[u][h] != K[64 * r + row, k]
            if bad:
                errs.append(f"{cfg.name} wg{c}: K's register fragments wrong in {bad} places")
        # The warpgroup's registers of P^T and dS^T in the accumulator layout.
        pt_regs = scatter_acc(Pt[64 * r : 64 * r + 64, s_col0 : s_col0 + ns])
        dst_regs = scatter_acc(dSt[64 * r : 64 * r + 64, s_col0 : s_col0 + ns])
        wg_regs[c] = (r, s, pt_regs, dst_regs)
        # store_pds: pairs (j, i) of packed registers to the swizzled dS^T tile (stmatrix x4:
        # matrix m = fragment (i = m % 2, j + m / 2), lane l addresses row l % 8 of matrix l / 8).
        # dq_transposed: store_ds_query_major, the same matrices stored transposed (.trans) into
        # the query-major tile: lane l addresses query row 8 (j + m / 2) + l % 8, keys from
        # 64 r + 16 w + 8 (m % 2) (chunk r).
        for w in range(4):
            for j in range(0, ns // 8, 2):
                frags = []
                for m in range(4):
                    jj, i = j + m // 2, m % 2
                    frags.append(
                        [
                            (
                                dst_regs[32 * w + ln, 4 * jj + 2 * i],
                                dst_regs[32 * w + ln, 4 * jj + 2 * i + 1],
                            )
                            for ln in range(32)
                        ]
                    )
                if cfg.dq_transposed:
                    # sw128_offset is the swizzled start of each row's 16 contiguous bytes.
                    row_addr = []
                    for ln in range(32):
                        m = ln // 8
                        query = 8 * (j + m // 2) + ln % 8
                        key = 64 * r + 16 * w + 8 * (m % 2)
                        row_addr.append(ds_tile + sw128_offset(query, key, cfg.chunk_bytes_q))
                    stmatrix_trans(smem, row_addr, frags)
                    continue
                for m in range(4):
                    for ln in range(32):
                        row = 64 * r + 16 * w + ln // 4 + 8 * (m % 2)
                        col = s_col0 + 8 * (j + m // 2) + 2 * (ln % 4)
                        off = ds_tile + sw128_offset(row, col, cfg.chunk_bytes_kv)
                        smem.put(off, frags[m][ln][0])
                        smem.put(off + 2, frags[m][ln][1])
    ds_writes = smem.writes[ds_tile // 2 : (ds_tile + cfg.pds_tile_bytes) // 2]
    if (ds_writes != 1).any():
        errs.append(
            f"{cfg.name}: dS^T buffer elements written {ds_writes.min()}..{ds_writes.max()} times"
        )

    # dV += P^T dO, dK += dS^T Q (RS), dQ = dS K (SS), per warpgroup.
    for c in range(cfg.W):
        r, s, pt_regs, dst_regs = wg_regs[c]
        dkv_col0 = s * cfg.dkv_cols
        for name, a_regs, y_tile, y in (("dV", pt_regs, do_tile, dO), ("dK", dst_regs, q_tile, Q)):
            acc = np.zeros((64, cfg.dkv_cols))
            b_start = y_tile + (dkv_col0 // 64) * cfg.chunk_bytes_q
            for kk in range(BM // 16):
                b = read_mnmajor(smem, b_start + kk * 16 * 128, cfg.chunk_bytes_q, cfg.dkv_cols)
                # A fragment = registers pf[4kk .. 4kk+3] = pairs of accumulator registers.
                a = np.full((64, 16), np.nan)
                for tid in range(128):
                    for reg32 in range(4):
                        k32 = 4 * kk + reg32  # pf index
                        for half in range(2):
                            row, kcol = a_frag_coords(tid, kk, reg32, half)
                            a[row, kcol - 16 * kk] = a_regs[tid, 2 * k32 + half]
                assert not np.isnan(a).any()
                acc += a @ b.T
            A = Pt if name == "dV" else dSt
            ref = A[64 * r : 64 * r + 64, :] @ y[:, dkv_col0 : dkv_col0 + cfg.dkv_cols]
            if not np.allclose(acc, ref):
                errs.append(f"{cfg.name} wg{c}: {name} wrong")
        qs, ds = c % cfg.dq_row_slices, c // cfg.dq_row_slices
        col0 = ds * cfg.dq_cols
        if cfg.dq_transposed:
            # issue_dqt: A = K^T (K's chunk ds, MN-major), B = dS (query-major tile, K-major).
            acc = np.zeros((64, BM))
            for kk in range(BN // 16):
                a = read_mnmajor(
                    smem,
                    cfg.k_off + ds * cfg.chunk_bytes_kv + kk * 16 * 128,
                    cfg.chunk_bytes_kv,
                    64,
                )
                b = read_kmajor(smem, ds_tile + (kk // 4) * cfg.chunk_bytes_q + (kk % 4) * 32, BM)
                acc += a @ b.T
            ref = (dSt.T @ K[:, col0 : col0 + 64]).T
            if not np.allclose(acc, ref):
                errs.append(f"{cfg.name} wg{c}: dQ^T piece wrong")
            continue
        acc = np.zeros((64, cfg.dq_cols))
        a_start = ds_tile + qs * cfg.chunk_bytes_kv
        b_start = cfg.k_off + (col0 // 64) * cfg.chunk_bytes_kv
        for kk in range(BN // 16):
            a = read_mnmajor(smem, a_start + kk * 16 * 128, cfg.chunk_bytes_kv, 64)
            b = read_mnmajor(smem, b_start + kk * 16 * 128, cfg.chunk_bytes_kv, cfg.dq_cols)
            acc += a @ b.T
        ref = dSt.T[64 * qs : 64 * qs + 64, :] @ K[:, col0 : col0 + cfg.dq_cols]
        if not np.allclose(acc, ref):
            errs.append(f"{cfg.name} wg{c}: dQ piece wrong")
    # Ownership covers each output exactly once.
    cover_dkv = np.zeros((BN, D), int)
    cover_dq = np.zeros((BM, D), int)
    cover_s = np.zeros((BN, BM), int)
    for c in range(cfg.W):
        r, s = divmod(c, cfg.col_splits)
        cover_dkv[64 * r : 64 * r + 64, s * cfg.dkv_cols : (s + 1) * cfg.dkv_cols] += 1
        cover_s[64 * r : 64 * r + 64, s * cfg.s_cols : (s + 1) * cfg.s_cols] += 1
        qs, ds = c % cfg.dq_row_slices, c // cfg.dq_row_slices
        rows = slice(0, BM) if cfg.dq_transposed else slice(64 * qs, 64 * qs + 64)
        cover_dq[rows, ds * cfg.dq_cols : (ds + 1) * cfg.dq_cols] += 1
    if not (cover_dkv == 1).all():
        errs.append(f"{cfg.name}: dK/dV ownership does not cover the tile once")
    if not (cover_dq == 1).all():
        errs.append(f"{cfg.name}: dQ ownership does not cover the tile once")
    if not (cover_s == 1).all():
        errs.append(f"{cfg.name}: S^T slices do not cover the tile once")
    return errs


def check_layouts_kv80(rng) -> list[str]:
    """kernel_kv80.cuh: kv80_scores (S = Q K^T, dP = dO V^T, 40 keys per warpgroup),
    kv80_store_transposed (P^T, dS^T into [80 keys][64 queries] buffers), kv80_dkv (dV^T += dO^T P,
    dK^T += Q^T dS) and kv80_dq (dQ^T = K^T dS^T)."""
    cfg, errs = KV80, []
    D, BM, BN = cfg.D, cfg.BM, cfg.BN
    for off in (cfg.k_off, cfg.v_off, cfg.q_off, cfg.do_off, cfg.pt_off, cfg.dst_off):
        if off % 1024 or cfg.pds_tile_bytes % 1024:
            errs.append(f"{cfg.name}: a tile offset is not 1024-aligned")
    K = rng.standard_normal((BN, D))
    V = rng.standard_normal((BN, D))
    Q = rng.standard_normal((BM, D))
    dO = rng.standard_normal((BM, D))
    smem = Smem(cfg.lse_off)
    q_tile = cfg.q_off + cfg.q_tile_bytes  # Q stage 1 (the dO ring has one stage)
    do_tile = cfg.do_off
    pt = cfg.pt_off + cfg.pds_tile_bytes  # buffer 1 of each
    dst = cfg.dst_off + cfg.pds_tile_bytes
    tma_load(smem, cfg.k_off, K, cfg.chunk_bytes_kv)
    tma_load(smem, cfg.v_off, V, cfg.chunk_bytes_kv)
    tma_load(smem, q_tile, Q, cfg.chunk_bytes_q)
    tma_load(smem, do_tile, dO, cfg.chunk_bytes_q)
    S = Q @ K.T  # [BM, BN]
    dP = dO @ V.T
    P = np.tanh(S)  # stand-ins for the softmax
    dS = P * dP
    for c in range(2):
        for name, x_tile, y_off, want, store, buf in (
            ("S", q_tile, cfg.k_off, S, P, pt),
            ("dP", do_tile, cfg.v_off, dP, dS, dst),
        ):
            acc = np.zeros((64, 40))
            for kk in range(D // 16):
                chunk, within = kk // 4, (kk % 4) * 32
                a = read_kmajor(smem, x_tile + chunk * cfg.chunk_bytes_q + within, 64)
                b = read_kmajor(
                    smem, y_off + chunk * cfg.chunk_bytes_kv + 40 * c * 128 + within, 40
                )
                acc += a @ b.T
            if not np.allclose(acc, want[:, 40 * c : 40 * c + 40]):
                errs.append(f"{cfg.name} wg{c}: {name} wrong")
            # kv80_store_transposed of the packed pairs pk[k] = regs (2k, 2k + 1), k = 2j + i.
            regs = scatter_acc(store[:, 40 * c : 40 * c + 40])
            for w in range(4):

                def pair(ln, j, i, w=w, regs=regs):
                    return regs[32 * w + ln, 4 * j + 2 * i], regs[32 * w + ln, 4 * j + 2 * i + 1]

                for j in (0, 2):
                    addr = []
                    for ln in range(32):
                        m = ln // 8
                        key = 40 * c + 8 * (j + m // 2) + ln % 8
                        query = 16 * w + 8 * (m % 2)
                        addr.append(buf + sw128_offset(key, query, cfg.chunk_bytes_kv))
                    frags = [[pair(ln, j + m // 2, m % 2) for ln in range(32)] for m in range(4)]
                    stmatrix_trans(smem, addr, frags)
                addr = []
                for ln in range(16):
                    key = 40 * c + 32 + ln % 8
                    query = 16 * w + 8 * ((ln // 8) % 2)
                    addr.append(buf + sw128_offset(key, query, cfg.chunk_bytes_kv))
                stmatrix_trans(smem, addr, [[pair(ln, 4, m) for ln in range(32)] for m in range(2)])
    for name, buf, want in (("P^T", pt, P.T), ("dS^T", dst, dS.T)):
        w = smem.writes[buf // 2 : (buf + cfg.pds_tile_bytes) // 2]
        if (w != 1).any():
            errs.append(f"{cfg.name}: {name} buffer elements written {w.min()}..{w.max()} times")
            continue
        got = np.array(
            [
                [smem.get(buf + sw128_offset(k, q, cfg.chunk_bytes_kv)) for q in range(BM)]
                for k in range(BN)
            ]
        )
        if not np.array_equal(got, want):
            errs.append(
                f"{cfg.name}: {name} buffer is not [80 keys][64 queries] in the sw128 layout"
            )
    for c in range(2):
        for blk in range(2):
            piece = 2 * c + blk  # head-dim rows 64 piece ..
            hd = slice(64 * piece, 64 * piece + 64)
            for name, x_tile, buf, ref in (
                ("dV^T", do_tile, pt, dO[:, hd].T @ P),
                ("dK^T", q_tile, dst, Q[:, hd].T @ dS),
            ):
                acc = np.zeros((64, 80))
                for kk in range(BM // 16):
                    a = read_mnmajor(
                        smem,
                        x_tile + piece * cfg.chunk_bytes_q + kk * 16 * 128,
                        cfg.chunk_bytes_q,
                        64,
                    )
                    b = read_kmajor(smem, buf + kk * 32, 80)
                    acc += a @ b.T
                if not np.allclose(acc, ref):
                    errs.append(f"{cfg.name} wg{c}: {name} piece {piece} wrong")
            acc = np.zeros((64, 64))
            for kk in range(BN // 16):
                a = read_mnmajor(
                    smem,
                    cfg.k_off + piece * cfg.chunk_bytes_kv + kk * 16 * 128,
                    cfg.chunk_bytes_kv,
                    64,
                )
                b = read_mnmajor(smem, dst + kk * 16 * 128, cfg.chunk_bytes_kv, 64)
                acc += a @ b.T
            if not np.allclose(acc, (dS @ K[:, hd]).T):
                errs.append(f"{cfg.name} wg{c}: dQ^T piece {piece} wrong")
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


def tiled_backward(cfg, q, k, v, o, lse, do, dlse, scale, causal):
    """bwd_preprocess + the main kernel + bwd_postprocess at tile level, with the kernels' index
    math (block_m x block_n steps; the 64 x 80 kernel's transposed products give the same sums)."""
    b, sq, hq, D = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    grp = hq // hkv
    BM, BN = cfg.BM, cfg.BN
    rows = (sq + 79) // 80 * 80 if D == 128 else sq
    pad = (rows + 127) // 128 * 128  # workspace.h bwd_seq_q_pad
    assert pad >= (sq + BM - 1) // BM * BM
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


def check_tiling(cfg, rng) -> list[str]:
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
                        f"{cfg.name} {shape} causal={causal}: {name} "
                        f"max err {np.abs(got - ref).max():.3e}"
                    )
    return errs


# ----------------------------------------------------------------------------------------------
# 3. dq_accum's fragment order (config.cuh dq_frag_offset / dq_accum_offset(_any))
# ----------------------------------------------------------------------------------------------


def dq_frag_offset(cfg: Cfg, c, t, k):
    return c * cfg.dq_piece_floats + 2 * ((k // 2) * 128 + t) + k % 2


def dq_accum_offset_any(cfg: Cfg, row, col):
    """dq_transposed: (query row, head-dim col) -> the dQ^T piece's fragment slot."""
    c, r = col // 64, col % 64
    t = 32 * (r // 16) + 4 * (r % 8) + (row % 8) // 2
    k = 4 * (row // 8) + 2 * ((r % 16) // 8) + row % 2
    return dq_frag_offset(cfg, c, t, k)


def dq_accum_offset(cfg: Cfg, row, col):
    qs, ds = row // 64, col // cfg.dq_cols
    c = qs + ds * cfg.dq_row_slices
    rin, cin = row % 64, col % cfg.dq_cols
    t = 32 * (rin // 16) + 4 * (rin % 8)
    k = 4 * (cin // 8) + 2 * ((rin % 16) // 8)
    return dq_frag_offset(cfg, c, t, k)


def check_dq_tile(cfg: Cfg) -> list[str]:
    """The consumers' stores (stage_dq_tile: warpgroup c = (qs, ds) split of bwd_consumer_tile,
    thread t, register k of the dQ accumulator) fill the block_m x head_dim float tile exactly
    once, a warp's float2 stores are 256 contiguous bytes, and the postprocess (dq_accum_offset of
    each 8-column group, read as 8 contiguous floats) gets back dQ[row, col] for every element."""
    errs = []
    BM, D = cfg.BM, cfg.D
    dq = np.arange(BM * D, dtype=np.float64).reshape(BM, D) + 0.5
    tile = np.full(BM * D, np.nan)
    written = np.zeros(BM * D, dtype=int)
    for c in range(cfg.W):
        qs, ds = c % cfg.dq_row_slices, c // cfg.dq_row_slices
        if cfg.dq_transposed:
            piece = dq[:, ds * cfg.dq_cols : (ds + 1) * cfg.dq_cols].T  # dQ^T rows [64 ds, ...)
        else:
            piece = dq[64 * qs : 64 * qs + 64, ds * cfg.dq_cols : (ds + 1) * cfg.dq_cols]
        regs = scatter_acc(piece)
        for t in range(128):
            for u in range(cfg.dq_regs // 2):
                off = dq_frag_offset(cfg, c, t, 2 * u)
                # the kernel: base = dq_frag_offset(c, tid, 0), then + 256 floats per pair
                if off != dq_frag_offset(cfg, c, t, 0) + 256 * u or off % 2:
                    errs.append(f"{cfg.name}: store address of c={c} t={t} u={u}")
                for e in range(2):
                    tile[off + e] = regs[t, 2 * u + e]
                    written[off + e] += 1
        for w in range(4):
            for u in range(cfg.dq_regs // 2):
                offs = [dq_frag_offset(cfg, c, 32 * w + ln, 2 * u) for ln in range(32)]
                if offs != list(range(offs[0], offs[0] + 64, 2)):
                    errs.append(f"{cfg.name}: warp {w} pair {u} of c={c} not 256 contiguous bytes")
    if (written != 1).any():
        errs.append(f"{cfg.name}: dQ tile elements written {written.min()}..{written.max()} times")
    for row in range(BM):
        if cfg.dq_transposed:
            got = [tile[dq_accum_offset_any(cfg, row, col)] for col in range(D)]
            if not np.array_equal(got, dq[row]):
                errs.append(f"{cfg.name}: postprocess read of row {row}")
            continue
        for col in range(0, D, 8):
            o = dq_accum_offset(cfg, row, col)
            if not np.array_equal(tile[o : o + 8], dq[row, col : col + 8]):
                errs.append(f"{cfg.name}: postprocess read of row {row} cols {col}..{col + 7}")
    if BM * D * 4 % 16:
        errs.append(f"{cfg.name}: tile bytes not a multiple of 16")
    return errs[:10]


def kv80_dq_frag_offset(p, t, k):
    return p * 64 * 64 + 4 * ((k // 4) * 128 + t) + k % 4


def kv80_dq_accum_offset_any(row, col):
    p, r, q = col // 64, col % 64, row % 64
    t = 32 * (r // 16) + 4 * (r % 8) + (q % 8) // 2
    k = 4 * (q // 8) + 2 * ((r % 16) // 8) + q % 2
    return kv80_dq_frag_offset(p, t, k)


def check_dq_tile_kv80() -> list[str]:
    """kv80_add_dq: piece p = 2c + b of warpgroup c (dQ^T head-dim rows 64p .., all 64 queries),
    thread t adds registers 4j .. 4j + 3 with one 16-byte red at dq_frag_offset(p, t, 0) + 512 j:
    the tile's elements are each added once, a warp's adds cover 512 contiguous bytes, and the
    postprocess (dq_accum_offset_any) reads dQ[query, col] back."""
    errs = []
    dq = np.arange(64 * 256, dtype=np.float64).reshape(64, 256) + 0.5
    tile = np.full(64 * 256, np.nan)
    written = np.zeros(64 * 256, dtype=int)
    for p in range(4):
        regs = scatter_acc(dq[:, 64 * p : 64 * p + 64].T)  # the dQ^T piece's accumulator
        for t in range(128):
            base = kv80_dq_frag_offset(p, t, 0)
            for j in range(8):
                if base + 4 * 128 * j != kv80_dq_frag_offset(p, t, 4 * j) or (base + 512 * j) % 4:
                    errs.append(f"BwdHd256: add address of piece {p} t={t} j={j}")
                for e in range(4):
                    tile[base + 512 * j + e] = regs[t, 4 * j + e]
                    written[base + 512 * j + e] += 1
        for w in range(4):
            for j in range(8):
                offs = [kv80_dq_frag_offset(p, 32 * w + ln, 4 * j) for ln in range(32)]
                if offs != list(range(offs[0], offs[0] + 128, 4)):
                    errs.append(
                        f"BwdHd256: warp {w} adds {j} of piece {p} not 512 contiguous bytes"
                    )
    if (written != 1).any():
        errs.append(f"BwdHd256: dQ tile elements added {written.min()}..{written.max()} times")
    for row in range(64):
        for col in range(256):
            if tile[kv80_dq_accum_offset_any(row, col)] != dq[row, col]:
                errs.append(f"BwdHd256: postprocess read of row {row} col {col}")
    return errs[:10]


def check_epilogue_kv80(rng) -> list[str]:
    """kv80_stage_dkv: warpgroup c's dK^T (or dV^T) pieces b (head-dim rows 128c + 64b .., 80 keys
    in 40 accumulator registers) stored transposed with stmatrix x4 .trans into [80 keys] rows of
    epi_row_bytes = 528: the staging holds dK[key, hd] at key * 528 + 2 hd for every element once
    (what kv80_write_rows copies out), and the 8 row addresses of each stored matrix fall in 8
    distinct 16-byte bank groups (528 = 4 * 128 + 16)."""
    cfg, errs = KV80, []
    dk = rng.standard_normal((80, 256))
    smem = Smem(80 * cfg.epi_row_bytes)
    for c in range(2):
        for b in range(2):
            # The [64 hd, 80 keys] accumulator of head-dim rows 128c + 64b ..
            regs = scatter_acc(dk[:, 128 * c + 64 * b : 128 * c + 64 * b + 64].T)
            for w in range(4):
                for j in range(0, 10, 2):
                    frags = [
                        [
                            (
                                regs[32 * w + ln, 4 * (j + u // 2) + 2 * (u % 2)],
                                regs[32 * w + ln, 4 * (j + u // 2) + 2 * (u % 2) + 1],
                            )
                            for ln in range(32)
                        ]
                        for u in range(4)
                    ]
                    addr = []
                    for ln in range(32):
                        m = ln // 8
                        key = 8 * (j + m // 2) + ln % 8
                        col = 128 * c + 64 * b + 16 * w + 8 * (m % 2)
                        addr.append(key * cfg.epi_row_bytes + col * 2)
                    for rows in stmatrix_trans(smem, addr, frags):
                        if len({(a // 16) % 8 for a in rows}) != 8:
                            errs.append(
                                f"BwdHd256: epilogue stmatrix of c={c} b={b} w={w} j={j}: "
                                "bank conflicts"
                            )
    writes = smem.writes.reshape(80, -1)
    if (writes[:, :256] != 1).any() or writes[:, 256:].any():
        errs.append("BwdHd256: epilogue staging elements not each written once")
    elif not np.array_equal(smem.v.reshape(80, -1)[:, :256], dk):
        errs.append("BwdHd256: epilogue staging does not hold dK row-major")
    return errs[:10]


# ---------------------------------------------------------------------------------------------
# 4. Deterministic mode's dQ order (dq_writer.cuh bwd_dq_rank; scheduler.cuh bwd_query_blocks and
#    BwdGridScheduler's key blocks last-first under the causal mask)
# ---------------------------------------------------------------------------------------------


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
            n = nb - 1 - b if causal else b  # BwdGridScheduler in deterministic mode
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
    shapes = [(cfg.BM, cfg.BN) for cfg in CONFIGS] + [(KV80.BM, KV80.BN)]
    for _ in range(1500):
        bm, bn = shapes[rng.integers(len(shapes))]
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


def main():
    rng = np.random.default_rng(0)
    errs = []

    def report(what, e):
        print(f"{what} {'ok' if not e else 'FAIL'}")
        errs.extend(e)

    for cfg in CONFIGS:
        report(f"{cfg.name}: layouts", check_layouts(cfg, rng))
        report(f"{cfg.name}: tiling", check_tiling(cfg, rng))
        report(
            f"{cfg.name}: fragment-order dQ tile (stage_dq_tile, bulk reduce, postprocess)",
            check_dq_tile(cfg),
        )
    report("BwdHd256: layouts (64 x 80, transposed products)", check_layouts_kv80(rng))
    report("BwdHd256: tiling", check_tiling(KV80, rng))
    report("BwdHd256: fragment-order dQ pieces (kv80_add_dq, postprocess)", check_dq_tile_kv80())
    report("BwdHd256: dK/dV epilogue staging", check_epilogue_kv80(rng))
    report("deterministic dQ order (ranks, no deadlock, 1500 random shapes)", check_dq_order())
    for e in errs:
        print("  ", e)
    return 1 if errs else 0


if __name__ == "__main__":
    sys.exit(main())
