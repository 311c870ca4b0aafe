// Host entry point of the Hopper forward kernel (used by cuda/ffi/fwd_cuda.cu and the standalone
// check in tests/gpu/cuda). No CUDA device code here, so plain C++ can include it.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

namespace fa4::hopper {

enum class FwdDtype { kBf16, kF16 };

// Row-major [batch, seq, heads, head_dim] q/k/v/o; lse is float32 [batch, heads_q, seq_q].
struct FwdProblem {
  const void* q;
  const void* k;
  const void* v;
  void* o;
  float* lse;
  int64_t batch, seq_q, seq_k, heads_q, heads_kv, head_dim;
  FwdDtype dtype;
  float softmax_scale;
  bool causal;
  // Persistent kernel variants only (fwd_config.cuh Persist; the standalone harness): at most this
  // many CTAs instead of one per SM, so that small test problems run many tiles per CTA. 0: off.
  int max_ctas = 0;
  // Persistent kernel variants under a causal mask only (the standalone harness): this many
  // (head, batch) pairs per Lpt section instead of fwd_persistent_section's choice. 0: off.
  int lpt_section = 0;
};

// Validates the problem and enqueues the kernel on `stream`. Returns an empty string on success,
// else a message saying what was given and what is supported. Never aborts.
std::string launch_fwd(const FwdProblem& p, cudaStream_t stream);

// launch_fwd with `dispatch` in place of the head-dim dispatch to the library's kernels (after the
// same validation and empty-problem handling): how the standalone harness runs the other kernel
// variants (fwd_config.cuh; tests/gpu/cuda/fwd_variants_hd*.cu).
using FwdDispatch = std::string (*)(const FwdProblem&, cudaStream_t);
std::string launch_fwd_checked(const FwdProblem& p, cudaStream_t stream, FwdDispatch dispatch);

// One per head dim (fwd_hd64.cu, ...): dispatch on dtype and causal. Called by launch_fwd.
std::string launch_fwd_hd64(const FwdProblem& p, cudaStream_t stream);
std::string launch_fwd_hd128(const FwdProblem& p, cudaStream_t stream);
std::string launch_fwd_hd256(const FwdProblem& p, cudaStream_t stream);

}  // namespace fa4::hopper
