// The forward's tile schedulers: which (query tile, head, batch) a CTA runs in its round r. The
// kernel body asks FwdScheduler<Cfg, Causal> and nothing else, so a schedule is one type.
//   kSingleTile    grid (m blocks, heads, batch), one round; under a causal mask a pair's m blocks
//                  run in reverse, the longest (last) first.
//   kLongestFirst  causal: a 1-D grid in lpt_tile_coord's order (sections of args.lpt_section
//                  pairs whose K/V fits in L2, longest m block first inside a section); without a
//                  linear grid (args.lpt_section == 0: over 2^31 tiles) the single-tile grid.
//   kPersistent    one CTA per SM; round r runs tile persistent_deal_index(r, ...): a static stride
//                  without a mask (every tile is equally long), under it the longest-first order
//                  in sections (fwd/schedule_model.h picks the section) dealt boustrophedon.
#pragma once
#include <cuda_runtime.h>

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
};

template <class Cfg, bool Causal>
struct FwdScheduler {
  static constexpr bool kPersistent = Cfg::persistent();
  const FwdArgs& args;
  int num_tiles;

  __device__ __forceinline__ explicit FwdScheduler(const FwdArgs& a)
      : args(a), num_tiles(a.m_blocks * a.heads_q * a.batch) {}

  // The tile of round r; false once past the last one (the tile index grows with r, so the first
  // miss ends a CTA's loop).
  __device__ __forceinline__ bool tile(int r, FwdTileCoord& tc) const {
    if constexpr (kPersistent) {
      const int t = persistent_deal_index(r, int(gridDim.x), int(blockIdx.x), Causal);
      if (t >= num_tiles) return false;
      if (Causal) {
        tc = lpt_tile_coord(t, args.m_blocks, args.heads_q, args.batch, args.lpt_section);
      } else {
        const int pair = t / args.m_blocks;
        tc = {t % args.m_blocks, pair % args.heads_q, pair / args.heads_q};
      }
      return true;
    } else {
      if (Cfg::longest_first() && Causal && args.lpt_section > 0) {
        tc = lpt_tile_coord(int(blockIdx.x), args.m_blocks, args.heads_q, args.batch, args.lpt_section);
      } else {
        tc = {Causal ? int(gridDim.x) - 1 - int(blockIdx.x) : int(blockIdx.x), int(blockIdx.y), int(blockIdx.z)};
      }
      return r == 0;
    }
  }
};

}  // namespace fa4::hopper
