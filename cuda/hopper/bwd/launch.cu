// The library's backward entry: validation, the empty problems, and the dispatch to the named
// configuration and schedule of bwd_plan (heuristics.h).
#include <cstdint>

#include "hopper/bwd/heuristics.h"
#include "hopper/bwd/launch.h"

namespace fa4::hopper {

std::string bwd_check_launch(const BwdProblem& p, const BwdWorkspace& ws, cudaStream_t stream, int config_head_dim,
                             bool* done) {
  *done = true;
  std::string err = check_problem_shape(p);
  if (!err.empty()) return err;
  if (p.head_dim != config_head_dim)
    return "backward: head_dim " + std::to_string(p.head_dim) + " given to a configuration built for head_dim " +
           std::to_string(config_head_dim);
  const size_t dk_bytes = size_t(p.batch) * size_t(p.seq_k) * size_t(p.heads_kv) * size_t(p.head_dim) * 2;
  if (p.batch == 0 || p.heads_q == 0) return {};  // every output is empty
  if (p.seq_q == 0) {
    // No query: dq is empty and no gradient reaches k or v.
    if (dk_bytes == 0) return {};
    cudaError_t e = cudaMemsetAsync(p.dk, 0, dk_bytes, stream);
    if (e == cudaSuccess) e = cudaMemsetAsync(p.dv, 0, dk_bytes, stream);
    if (e != cudaSuccess) return std::string("backward memset failed: ") + cudaGetErrorString(e);
    return {};
  }
  for (const void* ptr : {p.q, p.k, p.v, p.o, p.d_o, static_cast<const void*>(p.dq),
                          static_cast<const void*>(p.dk), static_cast<const void*>(p.dv)}) {
    if (reinterpret_cast<uintptr_t>(ptr) % 16 != 0)
      return "q, k, v, o, do, dq, dk and dv must be 16-byte aligned for TMA and vector access";
  }
  for (const void* ptr : {static_cast<const void*>(ws.dq_accum), static_cast<const void*>(ws.dq_sem),
                          static_cast<const void*>(ws.lse2), static_cast<const void*>(ws.delta)}) {
    if (reinterpret_cast<uintptr_t>(ptr) % 16 != 0) return "backward workspace must be 16-byte aligned";
  }
  *done = false;
  return {};
}

#if FA4_BWD_PHASE_PROBE
static long long* g_probe = nullptr;
static long long g_probe_ctas = 0;
void bwd_set_phase_probe(long long* buffer, long long ctas) {
  g_probe = buffer;
  g_probe_ctas = buffer != nullptr ? ctas : 0;
}
long long* bwd_phase_probe(long long* ctas) {
  *ctas = g_probe_ctas;
  return g_probe;
}
#endif

std::string launch_bwd(const BwdProblem& p, const BwdWorkspace& ws, cudaStream_t stream) {
  std::string err = check_problem_shape(p);
  if (!err.empty()) return err;
  if (p.heads_kv == 0) return {};  // then heads_q == 0 too: every output is empty
  const BwdPlan plan = bwd_plan(p);
  switch (plan.config) {
    case BwdConfigId::kHd64: return launch_bwd_config<BwdHd64>(p, ws, stream, plan.schedule);
    case BwdConfigId::kHd64Persistent: return launch_bwd_config<BwdHd64Persistent>(p, ws, stream, plan.schedule);
    case BwdConfigId::kHd128: return launch_bwd_config<BwdHd128>(p, ws, stream, plan.schedule);
    case BwdConfigId::kHd128Rows80: return launch_bwd_config<BwdHd128Rows80>(p, ws, stream, plan.schedule);
    case BwdConfigId::kHd128Persistent: return launch_bwd_config<BwdHd128Persistent>(p, ws, stream, plan.schedule);
    default: return launch_bwd_config<BwdHd256>(p, ws, stream, plan.schedule);
  }
}

}  // namespace fa4::hopper
