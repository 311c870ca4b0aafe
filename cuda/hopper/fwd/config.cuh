// Forward-kernel configurations. FwdTile holds one tile geometry and derives every size, offset
// and count from it; the kernel reads them only through these accessors, so the producer and the
// consumers cannot disagree about a layout. The library's named configurations are at the bottom.
#pragma once
#include <cstdint>

#include "hopper/common/problem.h"

namespace fa4::hopper {

// How a configuration deals its query tiles to CTAs (fwd/scheduler.cuh).
enum class FwdSchedule {
  kSingleTile,    // one CTA per (query tile, head, batch); a causal pair's longest tile first
  kLongestFirst,  // causal: one linear grid, longest tiles first within L2-sized sections of pairs
  kPersistent,    // one CTA per SM looping over the tiles; next tile's loads overlap this epilogue
};

// HeadDim x (64 * ConsumerWarpgroups) query rows against BlockN-key blocks.
//   QkStages: K is loaded in this many head-dim sub-stages (each its own full barrier), so the
//     first k-steps of S = Q K^T start before the whole K tile has landed.
//   ProducerRegs / ConsumerRegs: the setmaxnreg split (per thread of a warpgroup).
//   WgSkip: each consumer warpgroup skips the key blocks none of ITS 64 rows can see (causal; and
//     all blocks when its rows are past seq_q), masks for its own rows, and still passes the issue
//     token and releases the skipped stages; S = Q K^T then waits for every K sub-stage before its
//     first wgmma (the skip makes the wait loop's trip count warpgroup-dependent, see issue_qk).
//   TrimFirst: a tile's first key block (the partial one: the causal diagonal or the seq_k tail)
//     is multiplied only over the 16-column groups this warpgroup's rows can see, S and PV alike.
template <int HeadDim, int ConsumerWarpgroups, int BlockN, int QkStages, int ProducerRegs, int ConsumerRegs,
          FwdSchedule Schedule, bool WgSkip = false, bool TrimFirst = false>
struct FwdTile {
  static constexpr int head_dim() { return HeadDim; }
  // Rows of Q per consumer warpgroup: one wgmma m64 row block.
  static constexpr int rows_per_warpgroup() { return 64; }
  static constexpr int consumer_warpgroups() { return ConsumerWarpgroups; }
  static constexpr int block_m() { return 64 * ConsumerWarpgroups; }
  static constexpr int block_n() { return BlockN; }
  static constexpr int kv_stages() { return 2; }
  static constexpr int qk_stages() { return QkStages; }
  static constexpr int producer_regs() { return ProducerRegs; }
  static constexpr int consumer_regs() { return ConsumerRegs; }
  static constexpr FwdSchedule schedule() { return Schedule; }
  static constexpr bool persistent() { return Schedule == FwdSchedule::kPersistent; }
  static constexpr bool longest_first() { return Schedule == FwdSchedule::kLongestFirst; }
  static constexpr bool wg_skip() { return WgSkip; }
  static constexpr bool k_wait_first() { return WgSkip; }
  static constexpr bool trim_first() { return TrimFirst; }
  // One producer warpgroup (a single thread issues TMA; the rest only give registers back).
  static constexpr int threads() { return 128 * (1 + ConsumerWarpgroups); }
  // TMA boxes and 128B-swizzle atoms are 64 two-byte columns wide.
  static constexpr int chunks() { return HeadDim / 64; }
  static constexpr int chunks_per_qk_stage() { return chunks() / QkStages; }
  // Shared-memory bytes of the tiles (2-byte elements).
  static constexpr uint32_t q_bytes() { return uint32_t(block_m()) * HeadDim * 2; }
  static constexpr uint32_t kv_tile_bytes() { return uint32_t(BlockN) * HeadDim * 2; }
  static constexpr uint32_t chunk_bytes_q() { return uint32_t(block_m()) * 128; }
  static constexpr uint32_t chunk_bytes_kv() { return uint32_t(BlockN) * 128; }
  static constexpr uint32_t q_offset() { return 0; }
  static constexpr uint32_t k_offset() { return q_bytes(); }
  static constexpr uint32_t v_offset() { return k_offset() + kv_stages() * kv_tile_bytes(); }
  // Persistent: O is staged in its own buffer (laid out like Q), so the next tile's Q can load
  // during this tile's epilogue; one tile per CTA stages O in the Q buffer.
  static constexpr uint32_t o_offset() { return v_offset() + kv_stages() * kv_tile_bytes(); }
  static constexpr uint32_t o_bytes() { return persistent() ? q_bytes() : 0; }
  // q_full, the K ring's full[stages][qk_stages] + empty[stages], the V ring's, then (persistent)
  // q_empty.
  static constexpr uint32_t barrier_offset() { return o_offset() + o_bytes(); }
  static constexpr uint32_t barrier_bytes() {
    return 8 * (1 + kv_stages() * (QkStages + 1) + 2 * kv_stages() + (persistent() ? 1 : 0));
  }
  // +1024: the dynamic smem base is only 16-byte aligned, swizzle atoms need 1024.
  static constexpr uint32_t smem_bytes() { return barrier_offset() + barrier_bytes() + 1024; }

  static_assert(HeadDim % 64 == 0, "head dim must be a multiple of the 64-column swizzle width");
  static_assert(chunks() % QkStages == 0, "K sub-stages must split the head dim into whole chunks");
  static_assert(BlockN % 16 == 0 && BlockN >= 64 && BlockN <= 256, "wgmma N and PV k-steps");
  static_assert(ProducerRegs + ConsumerWarpgroups * ConsumerRegs <= 512 && ProducerRegs % 8 == 0 &&
                    ConsumerRegs % 8 == 0,
                "register split must fit 64K registers per SM (in units of 128 threads)");
  static_assert(smem_bytes() <= 232448, "shared memory per block is at most 227 KB");
  static_assert(!TrimFirst || !persistent(), "the first-block trim is a configuration of the one-tile kernel");
};

// The library's configurations, one template per name, each instantiated per mask kind
// (common/problem.h: kDense, kCausal, kVariant). The masked kinds may take another tile than the
// dense one: their tiles are shorter on average and have partial blocks at both ends of the band,
// so kVariant takes the causal geometry (no first-block trim: its partial blocks are not the
// sequence's tail).
//
// "hd64": exp-bound (MUFU takes as long as the MMAs), so a third consumer warpgroup (192-row
// tiles) gives the tensor cores another warpgroup's MMAs while two do their softmax. O is only 32
// registers per thread, so 160 per consumer is enough.
//
// Under kVariant the mask state (the rows' bands and ids, the tile's unmasked key range) does not
// fit beside S, P and O in 160 registers (ptxas spilled in the main loop), so the variant kernels
// run two consumer warpgroups (128-row tiles) with 240 registers each.
template <MaskKind M>
struct FwdHd64 : FwdTile<64, M == MaskKind::kVariant ? 2 : 3, 128, 1, M == MaskKind::kVariant ? 24 : 32,
                         M == MaskKind::kVariant ? 240 : 160, FwdSchedule::kSingleTile> {
  static constexpr const char* name() { return "hd64"; }
};

// "hd64 persistent": the same tile, one CTA per SM (on short sequences the per-tile overhead is
// what the next tile's overlapped loads hide); under the causal mask each warpgroup skips the
// diagonal's blocks its own rows cannot see.
// kVariant: two consumer warpgroups, as FwdHd64; the producer warp walks the tiles for the
// segment narrowing, which needs more than 24 registers (40 / 232, as the persistent backward).
template <MaskKind M>
struct FwdHd64Persistent
    : FwdTile<64, M == MaskKind::kVariant ? 2 : 3, 128, 1, M == MaskKind::kVariant ? 40 : 32,
              M == MaskKind::kVariant ? 232 : 160, FwdSchedule::kPersistent, /*WgSkip=*/M != MaskKind::kDense> {
  static constexpr const char* name() { return "hd64 persistent"; }
};

// "hd128": a long 176-key tile without the mask, the first (tail) block trimmed to the columns
// its rows see; 128 x 128 under the causal mask (the trim's width switch cost the causal main loop
// more than it saved).
template <MaskKind M>
struct FwdHd128 : FwdTile<128, 2, M != MaskKind::kDense ? 128 : 176, 2, 24, 240, FwdSchedule::kSingleTile, false,
                          /*TrimFirst=*/M == MaskKind::kDense> {
  static constexpr const char* name() { return "hd128"; }
};

// "hd128 persistent": 128 x 128, one CTA per SM, O staged in its own buffer (both masks).
// kVariant: the producer warp walks the tiles for the segment narrowing, which needs more than 24
// registers (at 24 it spilled 96 bytes): 40 / 232, as the persistent backward.
template <MaskKind M>
struct FwdHd128Persistent : FwdTile<128, 2, 128, 2, M == MaskKind::kVariant ? 40 : 24,
                                    M == MaskKind::kVariant ? 232 : 240, FwdSchedule::kPersistent> {
  static constexpr const char* name() { return "hd128 persistent"; }
};

// "hd256": O alone takes 128 registers per thread, so the key tile is short (80). Without the mask
// the first block is trimmed; under it the tiles go longest first in L2-sized sections (one
// pair's tiles after another's left long tiles for the last wave).
template <MaskKind M>
struct FwdHd256 : FwdTile<256, 2, 80, 2, 24, 240,
                          M != MaskKind::kDense ? FwdSchedule::kLongestFirst : FwdSchedule::kSingleTile, false,
                          /*TrimFirst=*/M == MaskKind::kDense> {
  static constexpr const char* name() { return "hd256"; }
};

// Under the causal mask at head dims up to 128 a consumer releases K(kb) after its softmax (so
// ptxas keeps its PV wait below the softmax, fwd_pipelined_step) and takes its warpgroup index
// warp-uniform (fwd_kernel). Kernel-only on an H100 the pair was 2-4% faster on hd128 causal
// 8k-16k, level on hd64 causal, and up to 1.5% (hd128) / 4.6% (hd64) slower without a mask;
// hd256 was not measured (docs Part B).
template <class Cfg, MaskKind M>
constexpr bool fwd_late_k_release() {
  return M == MaskKind::kCausal && Cfg::head_dim() <= 128;
}

}  // namespace fa4::hopper
