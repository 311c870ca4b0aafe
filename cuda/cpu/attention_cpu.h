// Blocked online-softmax attention on the CPU: the same algorithm as the Hopper kernels, float32
// accumulation for every storage type, memory O(block) beyond inputs and outputs, all cores.
#pragma once

#include <cstdint>

#include "cpu/dtype_convert.h"

namespace jax_fa4::cpu {

// Layout of q, k, v, o and their gradients: [batch, seq, heads, head_dim], row-major.
// lse: [batch, heads_q, seq_q] float32, natural log. GQA: q head h reads kv head h / (heads_q / heads_kv).
// Causal is bottom-right aligned: query i sees key j iff j <= i + seq_k - seq_q (with lengths:
// i + kv_len - q_len); a query that sees no key gets o = 0 and lse = -inf (and zero gradients).
struct AttentionShape {
  int64_t batch;
  int64_t seq_q;
  int64_t seq_k;
  int64_t heads_q;
  int64_t heads_kv;
  int64_t head_dim;    // of q and k
  int64_t head_dim_v;  // of v and o
};

// A window bound at or beyond this magnitude is unbounded (the FFI handlers' convention: they
// saturate the int64 attributes there).
constexpr int64_t kWindowUnbounded = int64_t{1} << 30;

// Which keys each query sees and how its scores are modified. For batch b, query i, key j, with
// q_len = clamp(q_lengths[b], 0, seq_q) and kv_len = clamp(kv_lengths[b], 0, seq_k) (seq_q / seq_k
// when absent) and off = kv_len - q_len: key j is visible iff i < q_len, j < kv_len,
// i + off - window_left <= j <= i + off + window_right (causal: right = min(window_right, 0)) and
// q_segment_ids[b, i] == kv_segment_ids[b, j]. Scores s = softmax_scale * q.k become
// softcap * tanh(s / softcap) when softcap > 0. Query rows i >= q_len are padding: o 0, lse -inf,
// zero gradients. Any other row with no visible key: o 0, lse -inf, or sinks[b, h] with sinks.
// Absent arrays are null.
struct AttentionOptions {
  float softmax_scale;
  bool causal;
  int64_t window_left = kWindowUnbounded;  // may be negative (a band off the diagonal)
  int64_t window_right = kWindowUnbounded;
  float softcap = 0.0f;                     // 0: none
  const int32_t* q_lengths = nullptr;       // [batch]
  const int32_t* kv_lengths = nullptr;      // [batch]
  const int32_t* q_segment_ids = nullptr;   // [batch, seq_q]
  const int32_t* kv_segment_ids = nullptr;  // [batch, seq_k] (with q_segment_ids)
  const float* sinks = nullptr;             // [batch, heads_q] logits; the forward only
};

void attention_forward(ElementType type, const AttentionShape& shape, const AttentionOptions& opts,
                       const void* q, const void* k, const void* v, void* o, float* lse);

// dlse is the cotangent of lse (zeros when only o is differentiated): since d lse_i / d s_ij = P_ij,
// dS_ij = P_ij * (dP_ij - rowsum(dO * O)_i + dlse_i). The lse already holds any sink, so that
// formula (with P = exp(s' - lse)) needs no sink; opts.sinks is ignored here.
void attention_backward(ElementType type, const AttentionShape& shape,
                        const AttentionOptions& opts, const void* q, const void* k, const void* v,
                        const void* o, const float* lse, const void* d_o,
                        const float* dlse, void* dq, void* dk,
                        void* dv);

}  // namespace jax_fa4::cpu
