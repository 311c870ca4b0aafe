// Host-side choice of the persistent masked (causal or variant band) forward kernel's tile order (plain C++, no device
// code, so the extension can expose it to the CPU tests).
//
// The persistent scheduler deals the longest-first order (lpt_tile_coord: sections of `section`
// (head, batch) pairs, longest m block first inside a section) boustrophedon over the grid. One section over all pairs
// balances well, but the tiles that run together then belong to different pairs, so every tile
// reads its K/V from DRAM: at hd64 causal 2k the H200 counted a 27% L2 hit rate and 2.75 TB/s
// against cuDNN's 73% and 0.75 TB/s, and under the 700 W cap that traffic cost ~10% of the clock
// (1.70 vs 1.88 GHz in the steady state). Sections whose K/V fits in L2 keep the reuse,
// but how evenly the deal then spreads the work depends on the section size (a host model at hd64
// 2k: 1.005x to 1.06x the mean for the busiest CTA). So the launcher scores every section that
// fits with the same deal and a tile cost of its key blocks plus a fixed per-tile overhead, and
// takes the best.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "hopper/common/mask.cuh"
#include "hopper/fwd/tile_order.h"

namespace fa4::hopper {

struct FwdPersistentShape {
  int64_t seq_q, seq_k;
  int64_t pairs;              // heads_q * batch
  int64_t kv_bytes_per_pair;  // K and V bytes one (head, batch) pair reads, shared by a GQA group
  int block_m, block_n;
  int ctas;                   // the persistent grid
  // The band (common/mask.cuh, causal folded in): the causal one unless a variant's window is
  // given; m_ascending: the deal's m blocks run upwards (fwd/scheduler.cuh, args.m_ascending).
  int window_left = kWindowUnbounded;
  int window_right = 0;
  bool m_ascending = false;
};

// Key blocks the band gives query block m (lengths and segment ids are device data: the model
// sees the band only).
inline int fwd_model_key_blocks(const FwdPersistentShape& s, int m) {
  const MaskArgs a{int(s.seq_q), int(s.seq_k), s.window_left, s.window_right, nullptr, nullptr,
                   nullptr,      nullptr,      nullptr,       nullptr};
  int begin, end;
  TileMask<MaskKind::kVariant>(a, 0).key_blocks(m * s.block_m, m * s.block_m + s.block_m, s.block_n, &begin, &end);
  return end - begin;
}

// Pairs' K/V that a section may hold: about half the H200's 50 MB L2 (the K/V of the sections
// before and after are still partly resident when a section starts).
constexpr int64_t kFwdSectionL2Bytes = int64_t(24) << 20;
// Per-tile overhead of the cost model in half key blocks (Q load, epilogue: ~1.5 blocks at hd64 2k).
constexpr int64_t kFwdTileOverheadHalfBlocks = 3;
// Sections the chooser scores at most, and the tile-visits it may spend (host time per new shape: ~4M visits, tens of ms at most).
constexpr int64_t kFwdSectionCandidates = 64;
constexpr int64_t kFwdSectionScoreBudget = int64_t(1) << 22;

// The busiest CTA's cost (half key blocks) when the persistent scheduler deals the masked longest-first order with
// `section` pairs per section.
inline int64_t fwd_persistent_busiest_cost(const FwdPersistentShape& s, int64_t section) {
  const int m_blocks = int((s.seq_q + s.block_m - 1) / s.block_m);
  const int64_t tiles = int64_t(m_blocks) * s.pairs;
  std::vector<int64_t> cost(static_cast<std::size_t>(m_blocks));
  for (int m = 0; m < m_blocks; ++m)
    cost[static_cast<std::size_t>(m)] = 2 * int64_t(fwd_model_key_blocks(s, m)) + kFwdTileOverheadHalfBlocks;
  std::vector<int64_t> per_cta(static_cast<std::size_t>(s.ctas), 0);
  // lpt_tile_coord's m block only depends on the pair count, not on how it splits into heads.
  const int heads = int(s.pairs), batch = 1;
  for (int64_t t = 0; t < tiles; ++t) {
    // The CTA that runs tile t: within a round the deal is a reflection or the identity, so it
    // is its own inverse.
    const int r = int(t / s.ctas);
    const int b = persistent_deal_index(r, s.ctas, int(t % s.ctas), true) - r * s.ctas;
    int m = lpt_tile_coord(int(t), m_blocks, heads, batch, int(section)).m_block;
    if (s.m_ascending) m = m_blocks - 1 - m;
    per_cta[static_cast<std::size_t>(b)] += cost[static_cast<std::size_t>(m)];
  }
  int64_t busiest = 0;
  for (int64_t c : per_cta) busiest = c > busiest ? c : busiest;
  return busiest;
}

// The section (pairs per longest-first section, in [1, pairs]) for the persistent scheduler under a mask.
// Among the sections whose K/V fits kFwdSectionL2Bytes, the one whose busiest CTA costs least
// (ties: the larger). All pairs in one section only when even one pair's K/V does not fit, or when
// the scoring budget allows no candidate.
inline int64_t fwd_persistent_section(const FwdPersistentShape& s) {
  if (s.pairs <= 0 || s.ctas <= 0 || s.seq_q <= 0) return s.pairs > 0 ? s.pairs : 1;
  const int64_t fit = s.kv_bytes_per_pair > 0 ? kFwdSectionL2Bytes / s.kv_bytes_per_pair : s.pairs;
  if (fit < 1) return s.pairs;
  const int64_t largest = fit < s.pairs ? fit : s.pairs;
  const int64_t tiles = (s.seq_q + s.block_m - 1) / s.block_m * s.pairs;
  int64_t candidates = largest < kFwdSectionCandidates ? largest : kFwdSectionCandidates;
  const int64_t affordable = kFwdSectionScoreBudget / (tiles > 0 ? tiles : 1);
  if (affordable < candidates) candidates = affordable;
  if (candidates < 1) return s.pairs;
  // Candidates largest first, spread evenly over [1, largest] when there are more than the budget.
  int64_t best = largest, best_cost = -1;
  for (int64_t k = 0; k < candidates; ++k) {
    const int64_t section = largest - k * largest / candidates;
    const int64_t c = fwd_persistent_busiest_cost(s, section);
    if (best_cost < 0 || c < best_cost) best = section, best_cost = c;
  }
  return best;
}

}  // namespace fa4::hopper
