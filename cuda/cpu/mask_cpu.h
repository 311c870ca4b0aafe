// Which keys each query sees, for the CPU kernels: one type per batch entry (EntryMask) that
// answers the kernels' three questions, the key range of a query row (which key blocks a query
// block visits), the query range of a key (which query blocks a key block visits), and the
// visibility of one (query block, key block) tile (none, all, or per element).
#pragma once

#include <algorithm>
#include <cstdint>

#include "cpu/attention_cpu.h"
#include "cpu/tile_math.h"

namespace jax_fa4::cpu {

// How much of a tile is visible: kNone tiles are never loaded nor multiplied; kAll tiles run the
// unmasked products; kPartial tiles carry a per-element mask (tile_math.h, Keep).
enum class TileVis { kNone, kAll, kPartial };

// The rule of AttentionOptions (attention_cpu.h) for batch entry b.
class EntryMask {
 public:
  EntryMask(const AttentionShape& s, const AttentionOptions& o, int64_t b) {
    q_len_ = o.q_lengths ? std::clamp<int64_t>(o.q_lengths[b], 0, s.seq_q) : s.seq_q;
    kv_len_ = o.kv_lengths ? std::clamp<int64_t>(o.kv_lengths[b], 0, s.seq_k) : s.seq_k;
    off_ = kv_len_ - q_len_;
    left_ = o.window_left;
    right_ = o.causal ? std::min<int64_t>(o.window_right, 0) : o.window_right;
    if (o.q_segment_ids) {
      q_ids_ = o.q_segment_ids + b * s.seq_q;
      kv_ids_ = o.kv_segment_ids + b * s.seq_k;
    }
  }

  int64_t q_len() const { return q_len_; }
  int64_t kv_len() const { return kv_len_; }

  // The keys [lo, hi) that rows [r0, r1) may see by band and lengths (lo >= hi: none). The band
  // of a row, [key_lo(i), key_hi(i)), moves right with i, so the first and last valid rows bound
  // it.
  void key_span(int64_t r0, int64_t r1, int64_t* lo, int64_t* hi) const {
    r1 = std::min(r1, q_len_);
    if (r0 >= r1) {
      *lo = *hi = 0;
      return;
    }
    *lo = key_lo(r0);
    *hi = key_hi(r1 - 1);
  }

  // The rows [lo, hi) that may see keys [c0, c1) by band and lengths.
  void row_span(int64_t c0, int64_t c1, int64_t* lo, int64_t* hi) const {
    c1 = std::min(c1, kv_len_);
    if (c0 >= c1) {
      *lo = *hi = 0;
      return;
    }
    // Row i holds key j in its band iff j - off - right <= i <= j - off + left.
    *lo = bounded(right_) ? std::clamp<int64_t>(c0 - off_ - right_, 0, q_len_) : 0;
    *hi = bounded(left_) ? std::clamp<int64_t>(c1 - off_ + left_, 0, q_len_) : q_len_;  // (c1 - 1) - off + left + 1
  }

  // The visibility of rows [i0, i0 + rows) x keys [k0, k0 + cols) (rows, cols <= kVisStride).
  // kPartial fills vis[r * kVisStride + c] (1: row i0 + r sees key k0 + c); the other answers
  // leave it untouched. Only kPartial tiles pay the per-element test.
  TileVis tile(int64_t i0, int64_t rows, int64_t k0, int64_t cols, uint8_t* vis) const {
    int64_t lo, hi;
    key_span(i0, i0 + rows, &lo, &hi);
    if (lo >= hi || hi <= k0 || lo >= k0 + cols) return TileVis::kNone;
    if (q_ids_ && disjoint_ids(i0, std::min(i0 + rows, q_len_), k0, std::min(k0 + cols, kv_len_)))
      return TileVis::kNone;
    const bool band_full = i0 + rows <= q_len_ && k0 + cols <= kv_len_ && key_lo(i0 + rows - 1) <= k0 &&
                           key_hi(i0) >= k0 + cols;
    if (band_full && (!q_ids_ || one_id(i0, i0 + rows, k0, k0 + cols))) return TileVis::kAll;
    int64_t seen = 0;
    for (int64_t r = 0; r < rows; ++r) {
      uint8_t* vr = vis + r * kVisStride;
      const int64_t i = i0 + r;
      int64_t a = 0, e = 0;  // this row's band in tile columns
      if (i < q_len_) {
        a = std::clamp<int64_t>(key_lo(i) - k0, 0, cols);
        e = std::clamp<int64_t>(key_hi(i) - k0, 0, cols);
      }
      std::fill(vr, vr + cols, uint8_t{0});
      for (int64_t c = a; c < e; ++c) vr[c] = !q_ids_ || q_ids_[i] == kv_ids_[k0 + c];
      for (int64_t c = a; c < e; ++c) seen += vr[c];
    }
    if (seen == 0) return TileVis::kNone;
    return seen == rows * cols ? TileVis::kAll : TileVis::kPartial;
  }

 private:
  static bool bounded(int64_t w) { return w < kWindowUnbounded; }
  // Row i's band (i < q_len): keys j with i + off - left <= j <= i + off + right, j < kv_len.
  int64_t key_lo(int64_t i) const { return bounded(left_) ? std::clamp<int64_t>(i + off_ - left_, 0, kv_len_) : 0; }
  int64_t key_hi(int64_t i) const {
    return bounded(right_) ? std::clamp<int64_t>(i + off_ + right_ + 1, 0, kv_len_) : kv_len_;
  }

  static void id_range(const int32_t* ids, int64_t p0, int64_t p1, int32_t* mn, int32_t* mx) {
    *mn = ids[p0];
    *mx = ids[p0];
    for (int64_t p = p0 + 1; p < p1; ++p) {
      *mn = std::min(*mn, ids[p]);
      *mx = std::max(*mx, ids[p]);
    }
  }
  // Whether no id of rows [r0, r1) equals any id of keys [c0, c1), by their ranges (exact for
  // sorted ids, which packed sequences have; unsorted ids fall through to the element test).
  bool disjoint_ids(int64_t r0, int64_t r1, int64_t c0, int64_t c1) const {
    if (r0 >= r1 || c0 >= c1) return true;
    int32_t qa, qb, ka, kb;
    id_range(q_ids_, r0, r1, &qa, &qb);
    id_range(kv_ids_, c0, c1, &ka, &kb);
    return qb < ka || kb < qa;
  }
  // Whether rows [r0, r1) and keys [c0, c1) all carry one id.
  bool one_id(int64_t r0, int64_t r1, int64_t c0, int64_t c1) const {
    int32_t qa, qb, ka, kb;
    id_range(q_ids_, r0, r1, &qa, &qb);
    id_range(kv_ids_, c0, c1, &ka, &kb);
    return qa == qb && ka == kb && qa == ka;
  }

  int64_t q_len_, kv_len_, off_;
  int64_t left_, right_;  // the band around the diagonal; >= kWindowUnbounded: none on that side
  const int32_t* q_ids_ = nullptr;   // this entry's [seq_q] ids, or null
  const int32_t* kv_ids_ = nullptr;  // [seq_k]
};

}  // namespace jax_fa4::cpu
