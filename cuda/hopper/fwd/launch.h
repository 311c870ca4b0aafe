// Host entry points of the Hopper forward (cuda/ffi/fwd_cuda.cu and the standalone harness in
// tests/gpu/cuda). No CUDA device code here, so plain C++ can include it.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <string>

#include "hopper/common/problem.h"

namespace fa4::hopper {

// q/k/v/o [batch, seq, heads, head_dim] (common/problem.h); lse float32 [batch, heads_q, seq_q].
struct FwdProblem : ProblemShape {
  const void* q;
  const void* k;
  const void* v;
  void* o;
  float* lse;
  // Device scratch of at least fwd_workspace_bytes(...) bytes (decode/plan.h: the split-KV decode
  // path's partial outputs), any alignment; null / 0 when that is 0.
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
};

// The scheduler's parameters. Zero means the library's choice: one CTA per SM for a persistent
// configuration, and the longest-first section size its host model picks (fwd/schedule_model.h).
// The harness sets them to run many tiles per CTA on small problems, or to time a section size.
struct FwdScheduleParams {
  int max_ctas = 0;  // a persistent configuration runs at most this many CTAs
  int section = 0;   // (head, batch) pairs per longest-first section
};

// Validates the problem and enqueues the library's forward on `stream`: the configuration the
// host heuristics pick (fwd/heuristics.h). Returns an empty string on success, else a message
// saying what was given and what is supported. Never aborts.
std::string launch_fwd(const FwdProblem& p, cudaStream_t stream);

// One named configuration (fwd/config.cuh: FwdHd64, FwdHd64Persistent, FwdHd128,
// FwdHd128Persistent, FwdHd256), for both dtypes and every mask kind and score modifier (the
// dense, causal and variant kernels, the variant one also with the soft cap), after the same
// validation. The library's instantiations are in fwd/hd*.cu: a configuration is only built for
// its head dim.
template <template <MaskKind> class Config>
std::string launch_fwd_config(const FwdProblem& p, cudaStream_t stream, const FwdScheduleParams& params = {});

}  // namespace fa4::hopper
