// The backward's tile configurations: the geometry types with every derived size and shared-memory
// offset as a named accessor, and the named configurations the library builds. Plain constexpr
// C++ (no device code), so host code (the launch layer, the harness) can name them too.
//
// BwdTile (hd64, hd128; kernel.cuh). One CTA owns block_n() keys (rows of K and V) of one kv head
// and loops over the query tiles (block_m() rows) of every q head of its GQA group. Two consumer
// warpgroups share the work:
//   S^T = K Q^T and dP^T = V dO^T: the block_n x block_m tile is cut into row_groups() groups of
//     64 key rows, one per warpgroup (row_groups() == 2, col_splits() == 1), each over all
//     s_cols() == block_m query columns.
//   dV += P^T dO and dK += dS^T Q: warpgroup r owns key rows [64r, 64r + 64) and all head-dim
//     columns. It holds the whole P^T / dS^T rows it needs in registers (the RS wgmma).
//   dQ = dS K: the block_m x head_dim tile is cut into dq_row_slices() x dq_col_slices() pieces
//     of 64 x dq_cols(), one per warpgroup. The consumers write their piece to a float32
//     shared-memory tile in accumulator fragment order and warp 1 of the producer warpgroup adds
//     the whole tile to dq_accum with one 1-D bulk reduce-add per step (dq_writer.cuh); dq_accum
//     then holds each block_m x head_dim tile in that fragment order (dq_frag_offset).
//   block_m = 80 (dq_transposed()): no wgmma has M = 80, so dQ is taken the other way round,
//     dQ^T = K^T dS^T, warpgroup c owning head-dim rows [64c, 64c + 64) over all 80 queries
//     (M = 64, N = 80). dS^T then goes to shared memory query-major (block_m rows of keys, the
//     K-major B operand) instead of key-major, and dQ^T's fragments fill the dQ pieces.
//
// BwdTileKv80 (hd256; kernel_kv80.cuh): 64 queries x 80 keys per step, the products taken the
// other way round (see kernel_kv80.cuh), dQ by 16-byte atomics from the consumers.
#pragma once
#include <cstdint>

namespace fa4::hopper {

// The head dims whose grid configuration runs causal bands (a left window on the causal diagonal)
// on its kCausal kernel with one more threshold (BwdArgs::band_reach): hd128 only. At hd64 the
// band threshold cost the kCausal step more than the kVariant machinery it replaces
// (docs/hopper-kernels.md, Part B); hd256 (BwdTileKv80) has no threshold. The host's choice
// (bwd_causal_band, heuristics.h) and the kernels' (BwdTile::causal_bands) both read this.
constexpr bool bwd_causal_bands_at(int head_dim) { return head_dim == 128; }

// The head dims whose grid configuration runs soft-capped causal problems (no window, lengths or
// segment ids) on its kCausal kernel with the cap (BwdTile: hd64, hd128): the kVariant kernel's
// per-element mask pass and its single copy of the step are not needed for a causal mask. hd256
// (BwdTileKv80) runs every capped problem as kVariant.
constexpr bool bwd_softcap_causal_at(int head_dim) { return head_dim == 64 || head_dim == 128; }

template <int HeadDim, int BlockM, int BlockN, int ProducerRegs, int ConsumerRegs, bool Persistent>
struct BwdTile {
  // The 80-key hd256 kernel has its own geometry (BwdTileKv80); these say "not it".
  static constexpr bool kv80() { return false; }
  // 80 query rows a step (FA3's and FA4's hd128 tile without a mask): dQ^T = K^T dS^T (above).
  static constexpr bool dq_transposed() { return BlockM == 80; }
  // The 80-row tile is built for plain dense attention only (as FA3 and FA4 use it): the causal
  // and variant paths (ranks, bands, per-warp mask facts) are written and checked for the 64- and
  // 128-row tiles, and its 208 accumulator registers leave no room for their code.
  static constexpr bool dense_only() { return dq_transposed(); }
  // The step order (bwd_consumer_tile): dQ issued after dV and its piece staged while dK runs
  // (its shared-memory stores under a register-sourced product), nothing carried across steps;
  // or the look-ahead order, whose dQ(t) staging runs under the next step's S^T. hd64 keeps the
  // look-ahead: its grid kernel spills 88 B in the dQ-under-dK order (8 with the look-ahead).
  static constexpr bool dq_under_dk() { return HeadDim == 128; }
  // In the dQ-under-dK order, dQ is issued only once dV retired (the 80-row tile): with dQ^T's
  // 40 accumulators in flight beside dV's operands ptxas serializes the wgmma pipeline (C7512).
  static constexpr bool dq_after_dv_retired() { return dq_transposed(); }
  // S^T = K Q^T with K's first 64 head-dim columns as the register A operand (an RS wgmma; the
  // fragments loaded by ldmatrix once a tile, k_frag_regs() a thread), the rest of K at hd128 by
  // descriptor: each step's S^T then reads half (hd128) or none (hd64) of K from shared memory,
  // whose port the step saturates. The grid kernels of the 64-row hd128 tile (every mask), and
  // hd64's causal kernel without the cap (plain_causal); elsewhere the 16 registers spill (hd64
  // dense 28 B, capped 20 B, variant 140 B; the persistent kernels' 232 registers 32-124 B; the
  // 80-row tile's 208 accumulators).
  static constexpr bool k_in_registers(bool plain_causal) {
    return !Persistent && ((HeadDim == 128 && BlockM == 64) || (HeadDim == 64 && plain_causal));
  }
  static constexpr int k_frag_regs() { return 16; }  // 64 rows x 64 columns of 16-bit K a warpgroup
  // One CTA per SM looping over (key block, kv head, batch) tiles taken from a global counter
  // (bwd_kernel_persistent): the next tile's K/V loads overlap this tile's dK/dV stores, the
  // Q/dO ring and the dQ handshakes run on across tiles.
  static constexpr bool persistent() { return Persistent; }
  // Whether this configuration's kCausal kernels carry the band threshold (bwd_causal_bands_at);
  // the persistent kernel runs plain attention only.
  static constexpr bool causal_bands() { return bwd_causal_bands_at(HeadDim) && !Persistent; }
  static constexpr int head_dim() { return HeadDim; }
  static constexpr int block_m() { return BlockM; }  // query rows per main-loop step
  static constexpr int block_n() { return BlockN; }  // key rows per CTA
  static constexpr int consumer_warpgroups() { return 2; }
  static constexpr int threads() { return 128 * (1 + consumer_warpgroups()); }
  static constexpr int producer_regs() { return ProducerRegs; }
  static constexpr int consumer_regs() { return ConsumerRegs; }
  // Q/dO (with lse/delta) ring depth; dS double-buffered so one barrier per step suffices.
  static constexpr int q_stages() { return 2; }
  static constexpr int pds_stages() { return 2; }

  static constexpr int row_groups() { return BlockN / 64; }
  static constexpr int col_splits() { return consumer_warpgroups() / row_groups(); }
  static constexpr int s_cols() { return BlockM / col_splits(); }
  static constexpr int dkv_cols() { return HeadDim / col_splits(); }
  static constexpr int dq_row_slices() { return BlockM / 64; }
  static constexpr int dq_col_slices() { return consumer_warpgroups() / dq_row_slices(); }
  static constexpr int dq_cols() { return HeadDim / dq_col_slices(); }
  // dQ accumulator registers a thread: a 64 x dq_cols() piece of dQ, or (dq_transposed) the
  // 64 x block_m piece of dQ^T.
  static constexpr int dq_regs() { return (dq_transposed() ? BlockM : dq_cols()) / 2; }

  // TMA boxes and 128B-swizzle rows are 64 two-byte columns wide: a tile is stored as chunks of
  // 64 columns, each chunk rows x 128 bytes.
  static constexpr int chunks() { return HeadDim / 64; }
  static constexpr uint32_t chunk_bytes_q() { return uint32_t(BlockM) * 128; }   // Q, dO
  static constexpr uint32_t chunk_bytes_kv() { return uint32_t(BlockN) * 128; }  // K, V, dS^T
  static constexpr uint32_t q_tile_bytes() { return uint32_t(BlockM) * HeadDim * 2; }
  static constexpr uint32_t kv_tile_bytes() { return uint32_t(BlockN) * HeadDim * 2; }
  // dS^T: block_n key rows x block_m query columns, in chunks of 64 query columns; dq_transposed:
  // block_m query rows x block_n keys, in chunks of 64 keys (chunk_bytes_q() each).
  static constexpr uint32_t pds_tile_bytes() { return uint32_t(BlockN) * BlockM * 2; }
  static constexpr uint32_t vec_bytes() { return uint32_t(BlockM) * 4; }  // lse or delta of a tile
  // The float32 block_m x head_dim dQ tile, in dq_accum's fragment order.
  static constexpr uint32_t dq_tile_bytes() { return uint32_t(BlockM) * HeadDim * 4; }
  // Consumer warpgroup c's piece of it (its dq_regs() accumulators a thread: dq_frag_offset's
  // c-th block), which the writer adds alone as soon as that warpgroup has staged it.
  static constexpr int dq_piece_floats() { return 128 * dq_regs(); }
  static constexpr uint32_t dq_piece_bytes() { return uint32_t(dq_piece_floats()) * 4; }

  static constexpr uint32_t k_offset() { return 0; }
  static constexpr uint32_t v_offset() { return k_offset() + kv_tile_bytes(); }
  static constexpr uint32_t q_offset() { return v_offset() + kv_tile_bytes(); }
  static constexpr uint32_t do_offset() { return q_offset() + q_stages() * q_tile_bytes(); }
  static constexpr uint32_t ds_offset() { return do_offset() + q_stages() * q_tile_bytes(); }
  static constexpr uint32_t dq_offset() { return ds_offset() + pds_stages() * pds_tile_bytes(); }
  static constexpr uint32_t lse_offset() { return dq_offset() + dq_tile_bytes(); }
  static constexpr uint32_t delta_offset() { return lse_offset() + q_stages() * vec_bytes(); }
  static constexpr uint32_t barrier_offset() { return delta_offset() + q_stages() * vec_bytes(); }
  // kv_full, then the Q ring's full[q_stages][1] + empty[q_stages], then the dO ring's.
  static constexpr uint32_t ring_barrier_bytes() { return 8 * (1 + 2 * (2 * q_stages())); }
  // Persistent: after the ring barriers, kv_empty (8 B), tile_full[2], tile_empty[2] (16 B each),
  // tile ids int[2] (8 B).
  static constexpr uint32_t persistent_offset() { return barrier_offset() + ring_barrier_bytes(); }
  static constexpr uint32_t barrier_bytes() { return ring_barrier_bytes() + (Persistent ? 48 : 0); }
  // The variant kernels' per-warp copies of the tile's mask facts (bwd/variant.cuh): 8 consumer
  // warps x 64 bytes after the barriers.
  static constexpr uint32_t variant_offset() { return (barrier_offset() + barrier_bytes() + 63) / 64 * 64; }
  static constexpr uint32_t variant_bytes() { return 8 * 64; }
  // +1024: the dynamic smem base is only 16-byte aligned, swizzle atoms need 1024.
  static constexpr uint32_t smem_bytes() { return variant_offset() + variant_bytes() + 1024; }

  // Adapter so common/pipeline.cuh's TmaConsumerPipeline<T, Cfg, /*IsK=*/false> can drive the Q
  // and dO rings: its "kv" tile is our q tile.
  struct RowRing {
    static constexpr int kv_stages() { return q_stages(); }
    static constexpr int qk_stages() { return 1; }
    static constexpr int chunks() { return HeadDim / 64; }
    static constexpr uint32_t kv_tile_bytes() { return uint32_t(BlockM) * HeadDim * 2; }
    static constexpr uint32_t chunk_bytes_kv() { return uint32_t(BlockM) * 128; }
  };

  // Offset (in floats) inside dq_accum's block_m x head_dim tile of query block m (the tile sits
  // where the row-major one would, at row m * block_m) of the element of accumulator register k
  // (k = 4j + 2i + e, the PTX wgmma D fragment) of thread t of warpgroup c: the tile is the two
  // warpgroups' pieces one after the other, each piece float pairs (k / 2) major, thread minor,
  // so a warp's 8-byte stores cover 256 contiguous bytes.
  static constexpr int dq_frag_offset(int c, int t, int k) {
    return c * dq_piece_floats() + 2 * ((k / 2) * 128 + t) + k % 2;
  }
  // The inverse for the postprocess: offset of (row, col) of the tile, col % 8 == 0; the 8
  // columns col .. col + 7 of a row are 8 contiguous floats there.
  static constexpr int dq_accum_offset(int row, int col) {
    const int qs = row / 64, ds = col / dq_cols();
    const int c = qs + ds * dq_row_slices();  // the warpgroup of the consumer's (qs, ds) split
    const int rin = row % 64, cin = col % dq_cols();
    const int t = 32 * (rin / 16) + 4 * (rin % 8);  // lane % 4 = 0: column 8j
    const int k = 4 * (cin / 8) + 2 * ((rin % 16) / 8);
    return dq_frag_offset(c, t, k);
  }
  // dq_transposed: offset of (query row, head-dim col) in the tile, any row and col. Warpgroup
  // c = col / 64 holds dQ^T row r = col % 64 (the D fragment's row: 16 (t / 32) + t % 32 / 4 +
  // 8i) at column `row` (8j + 2 (t % 4) + e); the postprocess reads it element by element.
  static constexpr int dq_accum_offset_any(int row, int col) {
    const int c = col / 64, r = col % 64;
    const int t = 32 * (r / 16) + 4 * (r % 8) + (row % 8) / 2;
    const int k = 4 * (row / 8) + 2 * ((r % 16) / 8) + row % 2;
    return dq_frag_offset(c, t, k);
  }

  static_assert(HeadDim % 64 == 0, "head dim must be a multiple of the 64-column swizzle width");
  static_assert(BlockN == 128, "64 key rows per warpgroup, 2 row groups: P^T / dS^T stay in registers");
  static_assert(BlockM == 64 || BlockM == 128 || (BlockM == 80 && HeadDim == 128 && !Persistent),
                "dQ is cut into 64-row wgmma tiles, or (80 rows, hd128 grid only) taken as dQ^T");
  static_assert(q_offset() % 1024 == 0 && do_offset() % 1024 == 0 && ds_offset() % 1024 == 0 &&
                    chunk_bytes_q() % 1024 == 0 && pds_tile_bytes() % 1024 == 0,
                "128-byte swizzle atoms need 1024-byte aligned tiles");
  static_assert(s_cols() % 16 == 0 && s_cols() >= 32, "S^T slice width must be a wgmma N");
  static_assert(dq_cols() % 64 == 0 && dkv_cols() % 64 == 0, "whole 64-column chunks");
  // The CTA's register pool is threads() x the entry count (64K / threads() rounded down to 8:
  // 168), not 64K: setmaxnreg.inc past it waits forever (bwd_entry_regs, variant.cuh).
  static_assert(ProducerRegs + consumer_warpgroups() * ConsumerRegs <=
                        (threads() / 128) * (65536 / threads() / 8 * 8) &&
                    ProducerRegs % 8 == 0 && ConsumerRegs % 8 == 0,
                "register split must fit the CTA's entry allocation (3 x 168 per 128 threads)");
  static_assert(smem_bytes() <= 232448, "shared memory per block is at most 227 KB");
  static_assert(dq_offset() % 1024 == 0 && dq_tile_bytes() % 16 == 0, "bulk copy alignment");
  static_assert(consumer_warpgroups() == 2 && 2 * dq_piece_bytes() == dq_tile_bytes(),
                "one dQ piece per consumer warpgroup (their barriers: kBwdBarDqFull + wg)");
  // The warpgroups meet once a step (kBwdBarPds), so one's dS^T(t + 1) store may overlap the
  // other's dQ(t) read: only the second dS^T buffer keeps them apart (bwd_protocol_model.py).
  static_assert(pds_stages() >= 2, "the dS^T double buffer orders the warpgroups' dQ reads");
};

// The hd256 geometry: 64 queries x 80 keys (FA3's hd256 shape on Hopper). See kernel_kv80.cuh.
template <int HeadDim>
struct BwdTileKv80 {
  static_assert(HeadDim == 256, "the 80-key backward is the hd256 shape");
  static constexpr bool kv80() { return true; }
  static constexpr bool persistent() { return false; }
  static constexpr bool causal_bands() { return false; }  // a causal band runs kVariant here
  static constexpr bool dq_transposed() { return true; }
  static constexpr bool dense_only() { return false; }
  static constexpr int head_dim() { return HeadDim; }
  static constexpr int block_m() { return 64; }
  static constexpr int block_n() { return 80; }
  static constexpr int keys_per_warpgroup() { return 40; }
  static constexpr int consumer_warpgroups() { return 2; }
  static constexpr int threads() { return 128 * (1 + consumer_warpgroups()); }
  static constexpr int producer_regs() { return 24; }
  static constexpr int consumer_regs() { return 240; }
  static constexpr int q_stages() { return 2; }
  static constexpr int do_stages() { return 1; }
  static constexpr int pds_stages() { return 2; }
  static constexpr int chunks() { return HeadDim / 64; }
  static constexpr uint32_t chunk_bytes_q() { return 64u * 128; }   // Q, dO: 64 rows x 128 bytes
  static constexpr uint32_t chunk_bytes_kv() { return 80u * 128; }  // K, V, P^T, dS^T: 80 rows
  static constexpr uint32_t q_tile_bytes() { return 64u * HeadDim * 2; }
  static constexpr uint32_t kv_tile_bytes() { return 80u * HeadDim * 2; }
  static constexpr uint32_t pds_tile_bytes() { return 80u * 64 * 2; }
  static constexpr uint32_t vec_bytes() { return 64u * 4; }

  static constexpr uint32_t k_offset() { return 0; }
  static constexpr uint32_t v_offset() { return kv_tile_bytes(); }
  static constexpr uint32_t q_offset() { return 2 * kv_tile_bytes(); }
  static constexpr uint32_t do_offset() { return q_offset() + q_stages() * q_tile_bytes(); }
  static constexpr uint32_t pt_offset() { return do_offset() + do_stages() * q_tile_bytes(); }
  static constexpr uint32_t dst_offset() { return pt_offset() + pds_stages() * pds_tile_bytes(); }
  static constexpr uint32_t lse_offset() { return dst_offset() + pds_stages() * pds_tile_bytes(); }
  static constexpr uint32_t delta_offset() { return lse_offset() + q_stages() * vec_bytes(); }
  static constexpr uint32_t barrier_offset() { return delta_offset() + do_stages() * vec_bytes(); }
  // kv_full, then the Q ring's full[2][1] + empty[2], then the dO ring's full[1][1] + empty[1].
  static constexpr uint32_t barrier_bytes() { return 8 * (1 + 2 * q_stages() + 2 * do_stages()); }
  // The variant kernels' per-warp mask facts (bwd/variant.cuh), as BwdTile's.
  static constexpr uint32_t variant_offset() { return (barrier_offset() + barrier_bytes() + 63) / 64 * 64; }
  static constexpr uint32_t variant_bytes() { return 8 * 64; }
  static constexpr uint32_t smem_bytes() { return variant_offset() + variant_bytes() + 1024; }
  // Epilogue staging of dK and dV ([80 keys][256] each, rows padded to 528 bytes so the
  // transposed stmatrix rows of a warp hit distinct banks), over the Q / dO rings and buffers.
  static constexpr uint32_t epi_row_bytes() { return HeadDim * 2 + 16; }
  static constexpr uint32_t epi_dk_offset() { return q_offset(); }
  static constexpr uint32_t epi_dv_offset() { return q_offset() + 80 * epi_row_bytes(); }

  // Ring adapters for TmaConsumerPipeline (its "kv" tile is our 64-row Q / dO tile).
  template <int Stages>
  struct RowRingN {
    static constexpr int kv_stages() { return Stages; }
    static constexpr int qk_stages() { return 1; }
    static constexpr int chunks() { return HeadDim / 64; }
    static constexpr uint32_t kv_tile_bytes() { return 64u * HeadDim * 2; }
    static constexpr uint32_t chunk_bytes_kv() { return 64u * 128; }
  };
  using RowRing = RowRingN<2>;
  using DoRing = RowRingN<1>;

  // dq_accum tile of 64 queries: piece p (head-dim rows 64p .. 64p + 63 of dQ^T) of thread t,
  // accumulator register k (k = 4j + 2i + e: head-dim row 16 (t / 32) + t % 32 / 4 + 8i, query
  // 8j + 2 (t % 4) + e): (k / 4) major, thread minor, so a warp's 16-byte adds cover 512
  // contiguous bytes.
  static constexpr int dq_frag_offset(int p, int t, int k) { return p * 64 * 64 + 4 * ((k / 4) * 128 + t) + k % 4; }
  // Offset of dQ element (query row, head-dim col) inside its tile (any row, col).
  static constexpr int dq_accum_offset_any(int row, int col) {
    const int p = col / 64, r = col % 64, q = row % 64;
    const int t = 32 * (r / 16) + 4 * (r % 8) + (q % 8) / 2;
    const int k = 4 * (q / 8) + 2 * ((r % 16) / 8) + q % 2;
    return dq_frag_offset(p, t, k);
  }

  static_assert(k_offset() % 1024 == 0 && v_offset() % 1024 == 0 && q_offset() % 1024 == 0 &&
                    do_offset() % 1024 == 0 && pt_offset() % 1024 == 0 && dst_offset() % 1024 == 0 &&
                    chunk_bytes_kv() % 1024 == 0 && pds_tile_bytes() % 1024 == 0,
                "128-byte swizzle atoms need 1024-byte aligned tiles");
  static_assert(epi_dv_offset() + 80 * epi_row_bytes() <= lse_offset(), "epilogue staging fits the rings");
  static_assert(smem_bytes() <= 232448, "shared memory per block is at most 227 KB");
  static_assert(producer_regs() + consumer_warpgroups() * consumer_regs() <=
                    (threads() / 128) * (65536 / threads() / 8 * 8),
                "register split must fit the CTA's entry allocation (3 x 168 per 128 threads)");
};

// ---------------------------------------------------------------------------------------------
// The named configurations (launch.h declares them for host code; heuristics.h picks one).
// ---------------------------------------------------------------------------------------------

// hd64 (FA3's 128 x 128): S^T slices are 64 x 128 (64 accumulator registers each for S and dP),
// dK/dV 64 x 64 per warpgroup, dQ split by query rows.
struct BwdHd64 : BwdTile</*HeadDim=*/64, /*BlockM=*/128, /*BlockN=*/128, /*ProducerRegs=*/24,
                         /*ConsumerRegs=*/240, /*Persistent=*/false> {
  static constexpr const char* name() { return "hd64"; }
};

// hd128 (FA3's causal 64 x 128): dK and dV 64 x 128 per warpgroup (64 + 64 registers), S and dP
// 64 x 64 (32 + 32), dQ split by head-dim columns.
struct BwdHd128 : BwdTile<128, 64, 128, 24, 240, false> {
  static constexpr const char* name() { return "hd128"; }
};

// hd128 without a mask at 80 x 128 (FA3's and FA4's non-causal hd128 tile): a step does 25% more
// wgmma work than 64 x 128 over the same per-step costs (barriers, waits, handshakes); dQ^T =
// K^T dS^T (dq_transposed). Dense problems only.
struct BwdHd128Rows80 : BwdTile<128, 80, 128, 24, 240, false> {
  static constexpr const char* name() { return "hd128 (80x128)"; }
};

// hd128 on the persistent kernel (tile counter in the workspace; the producer warpgroup gets 40
// registers for the tile loop, the consumers 232).
struct BwdHd128Persistent : BwdTile<128, 64, 128, 40, 232, true> {
  static constexpr const char* name() { return "hd128 persistent"; }
};

// hd64 on the persistent kernel (as BwdHd128Persistent: 40 producer registers for the tile loop).
struct BwdHd64Persistent : BwdTile<64, 128, 128, 40, 232, true> {
  static constexpr const char* name() { return "hd64 persistent"; }
};

// hd256: 64 x 80 blocks, transposed dK/dV/dQ products, dQ by 16-byte atomics (kernel_kv80.cuh).
struct BwdHd256 : BwdTileKv80<256> {
  static constexpr const char* name() { return "hd256 (64x80)"; }
};

}  // namespace fa4::hopper
