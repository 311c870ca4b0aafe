// Host entry points of the Hopper backward (used by cuda/ffi/bwd_cuda.cu and the standalone check
// in tests/gpu/cuda). No CUDA device code here, so plain C++ can include it.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "hopper/bwd/workspace.h"
#include "hopper/common/problem.h"

namespace fa4::hopper {

// Row-major [batch, seq, heads, head_dim] q/k/v/o/d_o and dq/dk/dv (dq like q, dk/dv like k);
// lse and dlse float32 [batch, heads_q, seq_q]. dlse is the cotangent of lse (zeros unless the
// caller differentiates through it).
struct BwdProblem : ProblemShape {
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
  // Bitwise reproducible dq: the dQ adds of each query block are ordered by key block through a
  // semaphore in the workspace (bwd/dq_writer.cuh). dk and dv are reproducible either way.
  bool deterministic = false;
};

// The workspace (BwdWorkspace, bwd_seq_q_pad, the size and the split) is in workspace.h, which
// the host-only nanobind module includes too; these overloads take the problem.
inline size_t bwd_workspace_bytes(const BwdProblem& p) {
  return bwd_workspace_bytes(p.batch, p.seq_q, p.heads_q, p.head_dim);
}

// Splits one allocation of at least bwd_workspace_bytes(p) bytes (any alignment) into the workspace.
inline BwdWorkspace bwd_workspace_from(void* base, const BwdProblem& p) {
  return bwd_workspace_from(base, p.batch, p.seq_q, p.heads_q, p.head_dim);
}

// The tile scheduler's parameters (bwd/scheduler.cuh). heuristics.h fills them for the library.
struct BwdSchedule {
  // > 0: tiles in the sectioned longest-first order, this many (batch, kv head) pairs per section;
  // 0: key block fastest. Ignored in deterministic mode (its semaphore order needs the plain grid).
  int lpt_section = 0;
  // Persistent configurations: at most this many CTAs (0 = one per SM).
  int max_ctas = 0;
  // Variant problems (the kVariant grid kernels): key blocks last-first, when the band makes the
  // last key blocks the longest. Ignored in deterministic mode and by dense / causal problems.
  bool reverse_blocks = false;
};

// Validates the problem and enqueues the backward on `stream` (preprocess with the dq_accum
// zeroing, main kernel, postprocess) with the configuration and schedule of bwd_plan
// (heuristics.h). Returns an empty string on success, else a message saying what was given and
// what is supported. Never aborts.
std::string launch_bwd(const BwdProblem& p, const BwdWorkspace& ws, cudaStream_t stream);

#if FA4_BWD_PHASE_PROBE
// A phase-probe build (args.cuh): the buffer the next launches of the hd64 / hd128 grid kernel
// record into (ctas x kBwdProbeEvents, bwd/probe.cuh), or null to stop.
void bwd_set_phase_probe(long long* buffer, long long ctas);
long long* bwd_phase_probe(long long* ctas);
#endif

// The named configurations (bwd/config.cuh).
struct BwdHd64;
struct BwdHd64Persistent;
struct BwdHd128;
struct BwdHd128Rows80;
struct BwdHd128Persistent;
struct BwdHd256;

// One named configuration with an explicit schedule, after the same validation and empty-problem
// handling as launch_bwd (how the harness checks and times each configuration). Defined in
// bwd/launch_config.cuh, instantiated for the configurations above in bwd/hd64.cu, hd128.cu and
// hd256.cu.
template <class Cfg>
std::string launch_bwd_config(const BwdProblem& p, const BwdWorkspace& ws, cudaStream_t stream,
                              const BwdSchedule& schedule);
extern template std::string launch_bwd_config<BwdHd64>(const BwdProblem&, const BwdWorkspace&, cudaStream_t,
                                                       const BwdSchedule&);
extern template std::string launch_bwd_config<BwdHd64Persistent>(const BwdProblem&, const BwdWorkspace&,
                                                                 cudaStream_t, const BwdSchedule&);
extern template std::string launch_bwd_config<BwdHd128>(const BwdProblem&, const BwdWorkspace&, cudaStream_t,
                                                        const BwdSchedule&);
extern template std::string launch_bwd_config<BwdHd128Rows80>(const BwdProblem&, const BwdWorkspace&,
                                                              cudaStream_t, const BwdSchedule&);
extern template std::string launch_bwd_config<BwdHd128Persistent>(const BwdProblem&, const BwdWorkspace&,
                                                                  cudaStream_t, const BwdSchedule&);
extern template std::string launch_bwd_config<BwdHd256>(const BwdProblem&, const BwdWorkspace&, cudaStream_t,
                                                        const BwdSchedule&);

// The checks every launch makes before its kernels (launch.cu): the shape (check_problem_shape),
// head_dim == config_head_dim, the pointer alignment; and the problems with no work for the
// kernels (an empty output, or seq_q == 0: dk = dv = 0, enqueued here). Sets *done when nothing
// is left to launch.
std::string bwd_check_launch(const BwdProblem& p, const BwdWorkspace& ws, cudaStream_t stream, int config_head_dim,
                             bool* done);

}  // namespace fa4::hopper
