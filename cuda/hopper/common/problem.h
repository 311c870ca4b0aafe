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

// Row-major [batch, seq, heads, head_dim] q/k/v/o (as jax.nn.dot_product_attention); GQA: q head h
// reads kv head h / (heads_q / heads_kv). Causal is bottom-right aligned: query i sees keys
// j <= i + seq_k - seq_q.
struct ProblemShape {
  int64_t batch, seq_q, seq_k, heads_q, heads_kv, head_dim;
  Dtype dtype;
  float softmax_scale;
  bool causal;
};

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
  return {};
}

}  // namespace fa4::hopper
