// Blocked online-softmax attention on the CPU: the same algorithm as the Hopper kernels, float32
// accumulation for every storage type, memory O(block) beyond inputs and outputs, all cores.
#pragma once

#include <cstdint>

#include "cpu/dtype_convert.h"

namespace jax_fa4::cpu {

// Layout of q, k, v, o and their gradients: [batch, seq, heads, head_dim], row-major.
// lse: [batch, heads_q, seq_q] float32, natural log. GQA: q head h reads kv head h / (heads_q / heads_kv).
// Causal is bottom-right aligned: query i sees key j iff j <= i + seq_k - seq_q; a query that sees no
// key gets o = 0 and lse = -inf (and zero gradients).
struct AttentionShape {
  int64_t batch;
  int64_t seq_q;
  int64_t seq_k;
  int64_t heads_q;
  int64_t heads_kv;
  int64_t head_dim;    // of q and k
  int64_t head_dim_v;  // of v and o
};

struct AttentionOptions {
  float softmax_scale;
  bool causal;
};

void attention_forward(ElementType type, const AttentionShape& shape, const AttentionOptions& opts,
                       const void* q, const void* k, const void* v, void* o, float* lse);

// dlse is the cotangent of lse (zeros when only o is differentiated): since d lse_i / d s_ij = P_ij,
// dS_ij = P_ij * (dP_ij - rowsum(dO * O)_i + dlse_i).
void attention_backward(ElementType type, const AttentionShape& shape,
                        const AttentionOptions& opts, const void* q, const void* k, const void* v,
                        const void* o, const float* lse, const void* d_o,
                        const float* dlse, void* dq, void* dk,
                        void* dv);

}  // namespace jax_fa4::cpu
