// Host entry point of the Hopper backward kernels (used by cuda/ffi/bwd_cuda.cu and the standalone
// check in tests/gpu/cuda). No CUDA device code here, so plain C++ can include it.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

namespace fa4::hopper {

enum class BwdDtype { kBf16, kF16 };

// Row-major [batch, seq, heads, head_dim] q/k/v/o/d_o and dq/dk/dv (dq like q, dk/dv like k);
// lse and dlse float32 [batch, heads_q, seq_q]. dlse is the cotangent of lse (zeros unless the
// caller differentiates through it).
struct BwdProblem {
  const void* q;
  const void* k;
  const void* v;
  const void* o;
  const float* lse;
  const void* d_o;
  const float* dlse;
  void* dq;
  void* dk;
  void* dv;
  int64_t batch, seq_q, seq_k, heads_q, heads_kv, head_dim;
  BwdDtype dtype;
  float softmax_scale;
  bool causal;
};

// Scratch the backward needs on the device, all float32, rows padded to bwd_seq_q_pad(seq_q):
// dq_accum [batch, heads_q, pad, head_dim], lse2 and delta [batch, heads_q, pad].
struct BwdWorkspace {
  float* dq_accum;
  float* lse2;
  float* delta;
};

// Query rows rounded up to a whole number of every config's block_m (and 128-byte vectors).
inline int64_t bwd_seq_q_pad(int64_t seq_q) { return (seq_q + 127) / 128 * 128; }

// Bytes of one allocation holding the whole workspace (256-byte aligned sub-buffers).
inline size_t bwd_workspace_bytes(const BwdProblem& p) {
  const size_t rows = size_t(p.batch) * size_t(p.heads_q) * size_t(bwd_seq_q_pad(p.seq_q));
  return rows * size_t(p.head_dim) * 4 + 2 * rows * 4 + 512;
}

// Splits one allocation of bwd_workspace_bytes(p) bytes (256-byte aligned) into the workspace.
inline BwdWorkspace bwd_workspace_from(void* base, const BwdProblem& p) {
  const size_t rows = size_t(p.batch) * size_t(p.heads_q) * size_t(bwd_seq_q_pad(p.seq_q));
  auto up = [](size_t x) { return (x + 255) / 256 * 256; };
  char* b = static_cast<char*>(base);
  BwdWorkspace ws;
  ws.dq_accum = reinterpret_cast<float*>(b);
  ws.lse2 = reinterpret_cast<float*>(b + up(rows * size_t(p.head_dim) * 4));
  ws.delta = reinterpret_cast<float*>(b + up(rows * size_t(p.head_dim) * 4) + up(rows * 4));
  return ws;
}

// Validates the problem and enqueues the backward on `stream` (dq_accum zeroing, preprocess, main
// kernel, postprocess). Returns an empty string on success, else a message saying what was given
// and what is supported. Never aborts.
std::string launch_bwd(const BwdProblem& p, const BwdWorkspace& ws, cudaStream_t stream);

// One per head dim (bwd_hd64.cu, ...): dispatch on dtype and causal. Called by launch_bwd.
std::string launch_bwd_hd64(const BwdProblem& p, const BwdWorkspace& ws, cudaStream_t stream);
std::string launch_bwd_hd128(const BwdProblem& p, const BwdWorkspace& ws, cudaStream_t stream);
std::string launch_bwd_hd256(const BwdProblem& p, const BwdWorkspace& ws, cudaStream_t stream);

}  // namespace fa4::hopper
