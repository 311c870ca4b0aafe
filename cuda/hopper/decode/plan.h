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

// Rows (packed query heads x positions) one decode CTA holds: 16 per m16 MMA row tile, as many
// tiles as keep the float32 output accumulator within 128 registers per thread.
constexpr int decode_rows_per_cta(int64_t head_dim) { return head_dim == 64 ? 64 : head_dim == 128 ? 32 : 16; }

// Keys per pipeline stage (each of the four consumer warps takes 16 of them).
constexpr int kDecodeBlockN = 64;
// The most packed rows a (batch, kv head) pair may have for the decode path: beyond that the query
// tiles fill the GPU and the training forward's tensor-core tiles are the better kernel.
constexpr int kDecodeMaxRows = 64;
// CTAs the split count aims at: about four waves of two CTAs per SM on a 132-SM H100 / H200.
constexpr int64_t kDecodeTargetCtas = 1056;
// No split is cut shorter than this many keys (the per-CTA prologue and the combine amortised).
constexpr int64_t kDecodeMinSplitKeys = 512;
constexpr int64_t kDecodeMaxSplits = 256;
// (batch, head) pairs from which a problem without GQA runs the one-tile forward instead.
constexpr int64_t kDecodeMhaTrainingPairs = 128;

struct DecodePlan {
  bool use = false;
  int rows = 0;          // packed rows of one (batch, kv head) pair: group * seq_q
  int rows_per_cta = 0;  // decode_rows_per_cta(head_dim)
  int row_tiles = 0;     // ceil(rows / rows_per_cta)
  int splits = 0;        // CTAs over one pair's key range
};

inline DecodePlan decode_plan(int64_t batch, int64_t seq_q, int64_t seq_k, int64_t heads_q, int64_t heads_kv,
                              int64_t head_dim) {
  DecodePlan plan;
  if (batch <= 0 || seq_q <= 0 || seq_k <= 0 || heads_kv <= 0 || heads_q % heads_kv != 0) return plan;
  if (head_dim != 64 && head_dim != 128 && head_dim != 256) return plan;
  const int64_t rows = heads_q / heads_kv * seq_q;
  if (rows > kDecodeMaxRows) return plan;
  // Without GQA the one-tile forward reads K and V once per query head anyway, and with a CTA per
  // SM or more it streams faster than this kernel (H200, bf16, hd128, one query against 32,768
  // keys, batch 8 x 16 heads: 4,105 GB/s against 3,197).
  if (heads_q == heads_kv && batch * heads_q >= kDecodeMhaTrainingPairs) return plan;
  plan.use = true;
  plan.rows = int(rows);
  plan.rows_per_cta = decode_rows_per_cta(head_dim);
  plan.row_tiles = int((rows + plan.rows_per_cta - 1) / plan.rows_per_cta);
  const int64_t pairs = batch * heads_kv * plan.row_tiles;
  int64_t splits = (kDecodeTargetCtas + pairs / 2) / pairs;
  const int64_t by_keys = seq_k / kDecodeMinSplitKeys;
  if (splits > by_keys) splits = by_keys;
  if (splits > kDecodeMaxSplits) splits = kDecodeMaxSplits;
  plan.splits = int(splits < 1 ? 1 : splits);
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
