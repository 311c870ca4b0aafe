// Host entry of the split-KV decode forward (decode/plan.h, decode/kernel.cuh). No device code.
#pragma once
#include <cuda_runtime.h>

#include <string>

#include "hopper/decode/plan.h"
#include "hopper/fwd/launch.h"

namespace fa4::hopper {

// The plan of a forward problem (decode/plan.h), from its shape.
inline DecodePlan decode_plan(const ProblemShape& p) {
  return decode_plan(p.batch, p.seq_q, p.seq_k, p.heads_q, p.heads_kv, p.head_dim);
}

// Enqueues the decode path of a checked problem whose plan has use set: the split kernel and, with
// more than one split, the combine (p.workspace then holds decode_workspace_bytes). Returns an
// empty string on success, else what was wrong. Never aborts.
std::string launch_decode(const FwdProblem& p, const DecodePlan& plan, cudaStream_t stream);

}  // namespace fa4::hopper
