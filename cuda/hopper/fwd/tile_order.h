// The forward's tile orders as pure functions of the tile index, for the device schedulers
// (fwd/scheduler.cuh) and the host cost model (fwd/schedule_model.h) alike. Plain C++ on the host.
#pragma once
#include "hopper/common/mask.cuh"

namespace fa4::hopper {

struct FwdTileCoord {
  int m_block, head, batch;
};

// Longest-first order (causal): tile t of the linear grid -> (m block, head, batch). Sections of
// `section` (head, batch) pairs, pair = batch * heads + head, the last section possibly shorter;
// inside a section all pairs' last (longest) m block first, then the next one down. A bijection
// of [0, m_blocks * heads * batch) (tests/test_fwd_schedule.py checks it on the host).
FA4_HOST_DEVICE_INLINE FwdTileCoord lpt_tile_coord(int t, int m_blocks, int heads, int batch, int section) {
  const int pairs = heads * batch;
  const int per_section = section * m_blocks;
  const int sec = t / per_section;
  const int within = t - sec * per_section;
  const int in_section = pairs - sec * section < section ? pairs - sec * section : section;
  const int pair = sec * section + within % in_section;
  return {m_blocks - 1 - within / in_section, pair % heads, pair / heads};
}

// The persistent deal: the linear tile index CTA b of g runs in its round r. Under a causal mask
// odd rounds go backwards (boustrophedon), so with longest-first tiles every CTA's sum of tile
// lengths stays within about one tile of the others'.
FA4_HOST_DEVICE_INLINE int persistent_deal_index(int r, int g, int b, bool causal) {
  return r * g + (causal && (r & 1) ? g - 1 - b : b);
}

}  // namespace fa4::hopper
