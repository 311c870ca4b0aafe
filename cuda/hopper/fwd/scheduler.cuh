// The forward's tile schedulers: which (query tile, head, batch) a CTA runs in its round r. The
// kernel body asks FwdScheduler<Cfg, M> and nothing else, so a schedule is one type.
//   kSingleTile    grid (m blocks, heads, batch), one round; under a mask a pair's m blocks run
//                  longest first: in reverse under the causal mask, and under a variant's band in
//                  the direction the host found its visible key blocks to fall (args.m_ascending).
//   kLongestFirst  masked: a 1-D grid in lpt_tile_coord's order (sections of args.lpt_section
//                  pairs whose K/V fits in L2, longest m block first inside a section); without a
//                  linear grid (args.lpt_section == 0: over 2^31 tiles) the single-tile grid.
//   kPersistent    one CTA per SM; round r runs tile persistent_deal_index(r, ...): a static stride
//                  without a mask (every tile is equally long), under one the longest-first order
//                  in sections (fwd/schedule_model.h picks the section) dealt boustrophedon.
// The variant's lengths and segment ids live in device memory; the orders follow the band only.
#pragma once
#include <cuda_runtime.h>

#include "hopper/common/mask.cuh"
#include "hopper/fwd/config.cuh"
#include "hopper/fwd/tile_order.h"

namespace fa4::hopper {

// The forward kernel's parameters (besides the tensor maps).
struct FwdArgs {
  float* lse;
  int seq_q, seq_k, heads_q;
  int group;           // heads_q / heads_kv: q head h reads kv head h / group
  float scale_log2;    // softmax_scale * log2(e), folded into the exp2 FMA
  float softmax_scale;
  // The longest-first orders: (head, batch) pairs per section (0: the single-tile grid).
  int lpt_section;
  int m_blocks;
  int batch;
  // Attention variants: the kVariant kernels read the mask arguments; the soft cap's fields are
  // read by the kernels built with a cap, the sinks by every kernel's epilogue.
  MaskArgs mask;        // the band (causal folded in), lengths and segment ids
  float softcap_scale;  // soft cap c: softmax_scale / c (the raw score's factor inside tanh); the
                        // softcap kernels then run with scale_log2 = c log2(e), softmax_scale = c
  float bounded_bias;   // ScoreCap::kBounded: the integer bias k of 2^(t C - k) (fwd/launch.cuh)
  const float* sinks;   // [batch, heads_q] logits, or null
  int m_ascending;      // the band's visible key blocks fall with the m block: shortest last
};

template <class Cfg, MaskKind M>
struct FwdScheduler {
  static constexpr bool kPersistent = Cfg::persistent();
  // Tiles of unequal length (masked): longest first.
  static constexpr bool kOrdered = M != MaskKind::kDense;
  const FwdArgs& args;
  int num_tiles;

  __device__ __forceinline__ explicit FwdScheduler(const FwdArgs& a)
      : args(a), num_tiles(a.m_blocks * a.heads_q * a.batch) {}

  // The tile of round r; false once past the last one (the tile index grows with r, so the first
  // miss ends a CTA's loop).
  __device__ __forceinline__ bool tile(int r, FwdTileCoord& tc) const {
    if constexpr (kPersistent) {
      const int t = persistent_deal_index(r, int(gridDim.x), int(blockIdx.x), kOrdered);
      if (t >= num_tiles) return false;
      if (kOrdered) {
        tc = lpt_tile_coord(t, args.m_blocks, args.heads_q, args.batch, args.lpt_section);
        if (M == MaskKind::kVariant && args.m_ascending) tc.m_block = args.m_blocks - 1 - tc.m_block;
      } else {
        const int pair = t / args.m_blocks;
        tc = {t % args.m_blocks, pair % args.heads_q, pair / args.heads_q};
      }
      return true;
    } else {
      if (Cfg::longest_first() && kOrdered && args.lpt_section > 0) {
        tc = lpt_tile_coord(int(blockIdx.x), args.m_blocks, args.heads_q, args.batch, args.lpt_section);
        if (M == MaskKind::kVariant && args.m_ascending) tc.m_block = args.m_blocks - 1 - tc.m_block;
      } else {
        const bool reversed = kOrdered && !(M == MaskKind::kVariant && args.m_ascending);
        tc = {reversed ? int(gridDim.x) - 1 - int(blockIdx.x) : int(blockIdx.x), int(blockIdx.y), int(blockIdx.z)};
      }
      return r == 0;
    }
  }
};

}  // namespace fa4::hopper
