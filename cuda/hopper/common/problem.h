// The attention problem the Hopper launchers take: one shape, one dtype enum, one validation,
// shared by the forward and backward passes. Host-only plain C++ (the FFI handlers, the harness
// and the nanobind module include it).
#pragma once
#include <climits>
#include <cmath>
#include <cstdint>
#include <string>

namespace fa4::hopper {

enum class Dtype { kBf16, kF16 };

// The head dims the Hopper kernels are built for (one configuration set per head dim).
constexpr bool hopper_head_dim_supported(int64_t d) { return d == 64 || d == 128 || d == 256; }
inline const char* hopper_head_dims_text() { return "64, 128, 256"; }

// A window bound at or beyond this magnitude is unbounded (the FFI handlers pass 1 << 30 for None).
constexpr int kWindowUnbounded = 1 << 30;

// Which keys each query sees, and how its scores are modified (docs/design.md, "Attention
// variants"). For batch b, query i, key j, with q_len = q_lengths[b] and kv_len = kv_lengths[b]
// (both clamped to [0, seq]; seq_q / seq_k when absent) and off = kv_len - q_len, key j is visible
// iff i < q_len, j < kv_len, i + off - window_left <= j <= i + off + window_right (causal makes
// the right bound min(window_right, 0)), and q_segment_ids[b, i] == kv_segment_ids[b, j]. A query
// i >= q_len is padding (o 0, lse -inf, no sink); any other query with no visible key has o 0 and
// lse -inf, or the sink's logit. Absent arrays are null. Window bounds may be negative (a band
// that does not contain the diagonal: ring attention's off-diagonal blocks); the public API
// admits only non-negative ones.
struct AttentionVariant {
  int window_left = kWindowUnbounded;
  int window_right = kWindowUnbounded;
  float softcap = 0.f;                        // > 0: scores become softcap * tanh(s / softcap)
  const int32_t* q_lengths = nullptr;         // [batch]
  const int32_t* kv_lengths = nullptr;        // [batch]
  const int32_t* q_segment_ids = nullptr;     // [batch, seq_q]
  const int32_t* kv_segment_ids = nullptr;    // [batch, seq_k]
  // With the ids: the (min, max) id of every 64-row chunk, [batch, ceil(seq / 64), 2] (the CUDA
  // lowering computes them), from which the kernels skip key / query blocks between documents.
  const int32_t* q_segment_ranges = nullptr;
  const int32_t* kv_segment_ranges = nullptr;
  const float* sinks = nullptr;               // [batch, heads_q] float32 logits (forward only)

  bool has_window() const {
    return window_left < kWindowUnbounded || window_right < kWindowUnbounded;
  }
  bool has_lengths() const { return q_lengths != nullptr || kv_lengths != nullptr; }
  bool has_segments() const { return q_segment_ids != nullptr; }
};

// Rows per entry of the segment-range arrays.
constexpr int kSegmentChunk = 64;

// Row-major [batch, seq, heads, head_dim] q/k/v/o (as jax.nn.dot_product_attention); GQA: q head h
// reads kv head h / (heads_q / heads_kv). Causal is bottom-right aligned: query i sees keys
// j <= i + seq_k - seq_q (with lengths: j <= i + kv_len - q_len).
struct ProblemShape {
  int64_t batch, seq_q, seq_k, heads_q, heads_kv, head_dim;
  Dtype dtype;
  float softmax_scale;
  bool causal;
  AttentionVariant variant = {};
};

// The mask policy a problem runs under (common/mask.cuh): dense and causal have their own kernels
// (no per-element tests beyond the sequence ends); every other combination is kVariant.
enum class MaskKind { kDense, kCausal, kVariant };
inline MaskKind mask_kind(const ProblemShape& p) {
  const AttentionVariant& v = p.variant;
  if (v.has_window() || v.has_lengths() || v.has_segments()) return MaskKind::kVariant;
  return p.causal ? MaskKind::kCausal : MaskKind::kDense;
}

// What every Hopper launch needs of the shape (both passes): an empty string when the kernels can
// run it, else what was given and what is supported. Never aborts.
inline std::string check_problem_shape(const ProblemShape& p) {
  auto s = [](int64_t v) { return std::to_string(v); };
  if (p.batch < 0 || p.seq_q < 0 || p.seq_k < 0 || p.heads_q < 0 || p.heads_kv < 0)
    return "negative dimension";
  if (!hopper_head_dim_supported(p.head_dim))
    return "head_dim " + s(p.head_dim) + " is not supported by the Hopper kernels (supported: " +
           hopper_head_dims_text() + ")";
  if (p.heads_kv == 0 ? p.heads_q != 0 : p.heads_q % p.heads_kv != 0)
    return "heads_q (" + s(p.heads_q) + ") must be a multiple of heads_kv (" + s(p.heads_kv) + ")";
  // The backward pads seq_q to a multiple of 128 in int arithmetic.
  if (p.seq_q > INT_MAX - 128 || p.seq_k > INT_MAX)
    return "sequence length over 2^31-129 (seq_q " + s(p.seq_q) + ", seq_k " + s(p.seq_k) + ")";
  // Grid dimensions y and z.
  if (p.batch > 65535 || p.heads_q > 65535)
    return "batch (" + s(p.batch) + ") and heads_q (" + s(p.heads_q) + ") must each be at most 65535";
  if (!(p.softmax_scale > 0.f) || std::isinf(p.softmax_scale))
    return "softmax_scale must be positive and finite, got " + std::to_string(p.softmax_scale);
  const AttentionVariant& v = p.variant;
  if (!(v.softcap >= 0.f) || std::isinf(v.softcap))
    return "softcap must be 0 (none) or positive and finite, got " + std::to_string(v.softcap);
  if ((v.q_segment_ids == nullptr) != (v.kv_segment_ids == nullptr))
    return "q and kv segment ids must be given together";
  if (v.has_segments() && (v.q_segment_ranges == nullptr || v.kv_segment_ranges == nullptr))
    return "segment ids need their 64-row range arrays";
  return {};
}

}  // namespace fa4::hopper
