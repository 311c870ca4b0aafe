// Host entry point of the Hopper backward kernels (used by cuda/ffi/bwd_cuda.cu and the standalone
// check in tests/gpu/cuda). No CUDA device code here, so plain C++ can include it.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "hopper/bwd_workspace.h"

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
  // Bitwise reproducible dq: the dQ adds of each query block are ordered by key block through a
  // semaphore in the workspace (bwd_kernel.cuh). dk and dv are reproducible either way.
  bool deterministic = false;
};

// The workspace (BwdWorkspace, bwd_seq_q_pad, the size and the split) is in bwd_workspace.h, which
// the host-only nanobind module includes too; these overloads take the problem.
inline size_t bwd_workspace_bytes(const BwdProblem& p) {
  return bwd_workspace_bytes(p.batch, p.seq_q, p.heads_q, p.head_dim);
}

// Splits one allocation of at least bwd_workspace_bytes(p) bytes (any alignment) into the workspace.
inline BwdWorkspace bwd_workspace_from(void* base, const BwdProblem& p) {
  return bwd_workspace_from(base, p.batch, p.seq_q, p.heads_q, p.head_dim);
}

// Validates the problem and enqueues the backward on `stream` (dq_accum zeroing, preprocess, main
// kernel, postprocess). Returns an empty string on success, else a message saying what was given
// and what is supported. Never aborts.
std::string launch_bwd(const BwdProblem& p, const BwdWorkspace& ws, cudaStream_t stream);

// launch_bwd with `dispatch` in place of the head-dim dispatch to the library's kernels (after the
// same validation and empty-problem handling): how the standalone harness runs its other kernel
// variants (bwd_config.cuh; tests/gpu/cuda/bwd_variants_hd*.cu).
using BwdDispatch = std::string (*)(const BwdProblem&, const BwdWorkspace&, cudaStream_t);
std::string launch_bwd_checked(const BwdProblem& p, const BwdWorkspace& ws, cudaStream_t stream,
                               BwdDispatch dispatch);

// Launch options (bwd v3, NOTES.md), process-wide. The library runs with the defaults below: bit 0
// on (measured on the H200: +3-7% at seq 2048, no loss at 16k), bit 1 off (mixed results), bit 2 per head dim and seq_k (bwd_lpt_default).
// The standalone harness sets them (bwd_kernel_check --opts, a bit mask) to time them.
struct BwdLaunchOptions {
  // bit 0: dq_accum zeroed inside the preprocess (no cudaMemsetAsync), the preprocess with several
  // rows per warp and (head, batch) from the grid, the postprocess without 64-bit divisions.
  bool fused_prepost = true;
  // bit 1 (with bit 0): programmatic dependent launch of the main kernel and the postprocess
  // (griddepcontrol: the main kernel's K/V loads and barrier init overlap the preprocess's tail).
  bool pdl = false;
  // bit 2: causal only: a 1-D grid of (key block, kv head, batch) in sections of lpt_section_bytes
  // of Q/dO/dq_accum (L2), each section longest key block first (FA3's LPT idea). -1 = the
  // library's choice per head dim and seq_k (bwd_lpt_default), 0 = off, 1 = on (the harness sets 0 or 1).
  int lpt = -1;
  int64_t lpt_section_bytes = 16 << 20;
  // Persistent kernels: at most this many CTAs (0 = one per SM); the harness's --max-ctas, so small
  // checks still run many tiles per CTA.
  int max_ctas = 0;
};
BwdLaunchOptions& bwd_launch_options();

// One per head dim (bwd_hd64.cu, ...): dispatch on dtype and causal. Called by launch_bwd.
std::string launch_bwd_hd64(const BwdProblem& p, const BwdWorkspace& ws, cudaStream_t stream);
std::string launch_bwd_hd128(const BwdProblem& p, const BwdWorkspace& ws, cudaStream_t stream);
std::string launch_bwd_hd256(const BwdProblem& p, const BwdWorkspace& ws, cudaStream_t stream);

}  // namespace fa4::hopper
