// The decode path's plan: whether a forward problem runs the split-KV decode kernel instead of the
// training forward, and how it is cut. Host-only plain C++, a pure function of the static shape,
// so the nanobind module can tell the Python lowering how large the workspace result must be, the
// FFI handler can check it, and the launcher reads the same numbers.
//
// The decode kernel packs the query rows that share a kv head (group = heads_q / heads_kv heads
// times seq_q positions) into one CTA's rows, so K and V are read once per kv head, not once per
// query head, and splits the key range over several CTAs (split-KV) when (batch, kv head) pairs
// alone cannot fill the GPU. Each split writes a float32 partial output and its LSE into the
// workspace; a combine kernel merges them through their LSEs (with the sinks and the padding rows).
#pragma once
#include <cstddef>
#include <cstdint>

namespace fa4::hopper {

// How the decode kernel's four consumer warps share a stage of 64 keys (decode/kernel.cuh): each
// its own 16 keys for every row of the tile (kKeys), or each its own 16 rows for every key (kRows).
// A kKeys warp holds the float32 output of all the tile's rows (rows / 16 x head_dim / 2 registers
// a thread), a kRows warp a quarter of a 64-row tile's.
enum class DecodeWarpSplit { kKeys, kRows };

// The most packed rows a (batch, kv head) pair may have for the decode path: beyond that the query
// tiles fill the GPU and the training forward's tensor-core tiles are the better kernel.
constexpr int kDecodeMaxRows = 64;
// Rows (packed query heads x positions) one decode CTA holds: 16 per m16 MMA row tile. A pair
// with at most 16 rows takes one 16-row kKeys tile; more rows one kDecodeMaxRows-row tile, kKeys
// at head dim 64 (128 output registers a thread), kRows at 128 and 256 (64 and 128), so every row
// of a (batch, kv head) pair reads K and V once.
constexpr int decode_rows_per_cta(int64_t rows) { return rows <= 16 ? 16 : kDecodeMaxRows; }
constexpr DecodeWarpSplit decode_warp_split(int64_t head_dim, int rows_per_cta) {
  return rows_per_cta > 16 && head_dim > 64 ? DecodeWarpSplit::kRows : DecodeWarpSplit::kKeys;
}
// The most resident CTAs per SM a tile allows: two when a thread's output accumulator (rows of
// its warp / 16 x head_dim / 2 float32 registers) is at most 64 registers and the tile is a
// 16-row one, one otherwise (the 64-row kRows tile at hd128 has the registers for two, but its Q
// tile and three stages come 48 bytes over half an SM's shared memory once the 1 KB each block
// reserves is counted). Every SM holds the same bytes of loads in flight either way (one CTA holds
// twice the stages).
constexpr int decode_max_ctas_per_sm(int64_t head_dim, int rows_per_cta) {
  return rows_per_cta == 16 && head_dim / 2 <= 64 ? 2 : 1;
}

// Keys per pipeline stage (each of the four consumer warps takes 16 of them).
constexpr int kDecodeBlockN = 64;
// SMs the split count plans for (H100 SXM and H200). The plan is a function of the static shape
// alone (the workspace size is fixed at lowering); on a GPU with other counts only the balance of
// the waves changes.
constexpr int64_t kDecodeSms = 132;
// No split is cut shorter than this many key blocks (the per-CTA prologue and the combine amortised).
constexpr int64_t kDecodeMinSplitBlocks = 8;
constexpr int64_t kDecodeMaxSplits = 256;
// (batch, head) pairs from which a problem without GQA whose rows take more than one decode tile
// runs the one-tile forward instead (it reads K and V once per head; the decode tiles once each).
constexpr int64_t kDecodeMhaTrainingPairs = 128;

// The split count of `pairs` CTA rows over `blocks` key blocks each: the one that finishes first
// when every CTA streams at the same rate, i.e. the fewest (waves of `slots` CTAs) x (blocks per
// split + one block of prologue); ties go to fewer splits (less combine work).
constexpr int64_t decode_split_count(int64_t pairs, int64_t blocks, int64_t slots) {
  int64_t most = blocks / kDecodeMinSplitBlocks;
  if (most > kDecodeMaxSplits) most = kDecodeMaxSplits;
  if (most < 1) most = 1;
  int64_t best = 1, best_cost = -1;
  for (int64_t s = 1; s <= most; ++s) {
    const int64_t waves = (pairs * s + slots - 1) / slots;
    const int64_t cost = waves * ((blocks + s - 1) / s + 1);
    if (best_cost < 0 || cost < best_cost) best = s, best_cost = cost;
  }
  return best;
}

struct DecodePlan {
  bool use = false;
  int rows = 0;          // packed rows of one (batch, kv head) pair: group * seq_q
  int rows_per_cta = 0;  // decode_rows_per_cta(rows)
  int row_tiles = 0;     // ceil(rows / rows_per_cta)
  int splits = 0;        // CTAs over one pair's key range
  int ctas_per_sm = 0;   // resident CTAs per SM the kernel is built for (1 or 2)
  bool dependent = true;  // the split kernel launches as a programmatic dependent (decode_dependent_launch)
};

// One wave of one CTA per SM streaming at least this many K + V bytes per CTA launches the split
// kernel as an ordinary kernel: there the dependent launch measured 1.7-2% slower (8 x 32768 16/16:
// 16 MiB a CTA, 4,589 against 4,513 GB/s; hd256 16 x 8192 32/8: 8 MiB, 4,528 against 4,434), while
// 4 MiB a CTA (16 x 8192 32/8 at hd128) was level and shorter streams gained (cache 1,024: +2.9%).
constexpr int64_t kDecodeDependentMaxCtaBytes = int64_t(8) << 20;

inline bool decode_dependent_launch(const DecodePlan& plan, int64_t blocks, int64_t head_dim) {
  if (plan.ctas_per_sm > 1 || plan.splits > 1) return true;
  const int64_t cta_bytes = blocks * kDecodeBlockN * head_dim * 2 * 2;  // K and V, 16-bit
  return cta_bytes < kDecodeDependentMaxCtaBytes;
}

// The decode kernel's cut of a problem it can run (use = false when it cannot: more than
// kDecodeMaxRows rows per pair, another head dim), whichever kernel is faster for it.
// ctas_per_sm: 0 for the plan's residency (below), else that many CTAs per SM, up to the tile's
// most (the harness times the other residency with it).
inline DecodePlan decode_tiling(int64_t batch, int64_t seq_q, int64_t seq_k, int64_t heads_q, int64_t heads_kv,
                                int64_t head_dim, int ctas_per_sm = 0) {
  DecodePlan plan;
  if (batch <= 0 || seq_q <= 0 || seq_k <= 0 || heads_kv <= 0 || heads_q % heads_kv != 0) return plan;
  if (head_dim != 64 && head_dim != 128 && head_dim != 256) return plan;
  const int64_t rows = heads_q / heads_kv * seq_q;
  if (rows > kDecodeMaxRows) return plan;
  plan.use = true;
  plan.rows = int(rows);
  plan.rows_per_cta = decode_rows_per_cta(rows);
  plan.row_tiles = int((rows + plan.rows_per_cta - 1) / plan.rows_per_cta);
  const int64_t pairs = batch * heads_kv * plan.row_tiles;
  const int64_t blocks = (seq_k + kDecodeBlockN - 1) / kDecodeBlockN;
  // One CTA per SM where that cut is one wave of one CTA per pair, with no combine (16 x 8192
  // 32/8 streams 4,261 GB/s against 4,111 with two CTAs per SM, two splits and the combine);
  // otherwise the most the tile allows (more, shorter splits balance the SMs better: 64 x 4096
  // 32/8 and 1 x 131072 32/8 lose 1-2.5% at one CTA per SM).
  const int most = decode_max_ctas_per_sm(head_dim, plan.rows_per_cta);
  if (ctas_per_sm > 0) {
    plan.ctas_per_sm = ctas_per_sm < most ? ctas_per_sm : most;
  } else {
    plan.ctas_per_sm = most;
    if (most > 1 && pairs <= kDecodeSms && decode_split_count(pairs, blocks, kDecodeSms) == 1) plan.ctas_per_sm = 1;
  }
  plan.splits = int(decode_split_count(pairs, blocks, kDecodeSms * plan.ctas_per_sm));
  plan.dependent = decode_dependent_launch(plan, blocks, head_dim);
  return plan;
}

// The rows one kKeys tile held before the 64-row kRows tile (its float32 output within 128
// registers a thread): the MHA rule below still routes by it.
constexpr int64_t decode_kkeys_max_rows(int64_t head_dim) { return head_dim == 64 ? 64 : head_dim == 128 ? 32 : 16; }

// The library's choice: the decode kernel where decode_tiling allows it, except problems without
// GQA with enough (batch, head) pairs to fill the GPU and more rows than decode_kkeys_max_rows,
// which the one-tile forward streams (K and V read once per head): there the kKeys tiles took
// several tiles, each reading K and V again; the 64-row kRows tile has not been timed against the
// one-tile forward there. With one 16-row tile
// the decode kernel streams faster (H200, 8 x 32768, 16 heads, one query: 4,190 GB/s against 4,100).
inline DecodePlan decode_plan(int64_t batch, int64_t seq_q, int64_t seq_k, int64_t heads_q, int64_t heads_kv,
                              int64_t head_dim) {
  const DecodePlan plan = decode_tiling(batch, seq_q, seq_k, heads_q, heads_kv, head_dim);
  if (heads_q == heads_kv && batch * heads_q >= kDecodeMhaTrainingPairs && plan.rows > decode_kkeys_max_rows(head_dim))
    return DecodePlan{};
  return plan;
}

// Each workspace sub-buffer starts on this boundary; the slack moves an unaligned base up.
constexpr size_t kDecodeWorkspaceAlign = 256;

// The workspace of a split plan: partial outputs float32 [splits, batch, heads_kv, rows, head_dim],
// then partial LSEs float32 [splits, batch, heads_kv, rows], each from a kDecodeWorkspaceAlign
// boundary. One split writes the outputs directly and needs none. decode_workspace_bytes and
// decode_workspace_from both read these offsets.
struct DecodeWorkspace {
  float* o_part;
  float* lse_part;
};
inline size_t decode_align_up(size_t n) {
  return (n + kDecodeWorkspaceAlign - 1) / kDecodeWorkspaceAlign * kDecodeWorkspaceAlign;
}
inline size_t decode_partial_rows(const DecodePlan& plan, int64_t batch, int64_t heads_kv) {
  return size_t(plan.splits) * size_t(batch) * size_t(heads_kv) * size_t(plan.rows);
}
inline size_t decode_workspace_bytes(const DecodePlan& plan, int64_t batch, int64_t heads_kv, int64_t head_dim) {
  if (!plan.use || plan.splits <= 1) return 0;
  const size_t rows = decode_partial_rows(plan, batch, heads_kv);
  return kDecodeWorkspaceAlign + decode_align_up(rows * size_t(head_dim) * 4) + decode_align_up(rows * 4);
}
// The sub-buffers inside a workspace of decode_workspace_bytes at `base` (any alignment).
inline DecodeWorkspace decode_workspace_from(const DecodePlan& plan, int64_t batch, int64_t heads_kv,
                                             int64_t head_dim, void* base) {
  const uintptr_t at =
      (reinterpret_cast<uintptr_t>(base) + kDecodeWorkspaceAlign - 1) & ~uintptr_t(kDecodeWorkspaceAlign - 1);
  const size_t o_bytes = decode_align_up(decode_partial_rows(plan, batch, heads_kv) * size_t(head_dim) * 4);
  return {reinterpret_cast<float*>(at), reinterpret_cast<float*>(at + o_bytes)};
}

// Bytes of the uint8 workspace result of the CUDA forward custom call for this shape (0 unless the
// decode path runs it with more than one split).
inline size_t fwd_workspace_bytes(int64_t batch, int64_t seq_q, int64_t seq_k, int64_t heads_q, int64_t heads_kv,
                                  int64_t head_dim) {
  return decode_workspace_bytes(decode_plan(batch, seq_q, seq_k, heads_q, heads_kv, head_dim), batch, heads_kv,
                                head_dim);
}

}  // namespace fa4::hopper
