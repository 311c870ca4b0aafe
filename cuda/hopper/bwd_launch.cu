// Validation and head-dim dispatch for the backward kernels.
#include <climits>
#include <cmath>

#include "hopper/bwd_launch.h"

namespace fa4::hopper {

namespace {
std::string dispatch_head_dim(const BwdProblem& p, const BwdWorkspace& ws, cudaStream_t stream) {
  switch (p.head_dim) {
    case 64: return launch_bwd_hd64(p, ws, stream);
    case 128: return launch_bwd_hd128(p, ws, stream);
    default: return launch_bwd_hd256(p, ws, stream);
  }
}
}  // namespace

BwdLaunchOptions& bwd_launch_options() {
  static BwdLaunchOptions options;  // the library's defaults unless a harness sets them
  return options;
}

std::string launch_bwd(const BwdProblem& p, const BwdWorkspace& ws, cudaStream_t stream) {
  return launch_bwd_checked(p, ws, stream, dispatch_head_dim);
}

std::string launch_bwd_checked(const BwdProblem& p, const BwdWorkspace& ws, cudaStream_t stream,
                               BwdDispatch dispatch) {
  auto s = [](int64_t v) { return std::to_string(v); };
  if (p.batch < 0 || p.seq_q < 0 || p.seq_k < 0 || p.heads_q < 0 || p.heads_kv < 0)
    return "negative dimension";
  if (p.head_dim != 64 && p.head_dim != 128 && p.head_dim != 256)
    return "head_dim " + s(p.head_dim) + " is not supported by the Hopper kernel (supported: 64, 128, 256)";
  if (p.heads_kv == 0 ? p.heads_q != 0 : p.heads_q % p.heads_kv != 0)
    return "heads_q (" + s(p.heads_q) + ") must be a multiple of heads_kv (" + s(p.heads_kv) + ")";
  if (p.seq_q > INT_MAX - 128 || p.seq_k > INT_MAX)
    return "sequence length over 2^31-129 (seq_q " + s(p.seq_q) + ", seq_k " + s(p.seq_k) + ")";
  if (p.batch > 65535 || p.heads_kv > 65535)
    return "batch (" + s(p.batch) + ") and heads_kv (" + s(p.heads_kv) + ") must each be at most 65535";
  if (!(p.softmax_scale > 0.f) || std::isinf(p.softmax_scale))
    return "softmax_scale must be positive and finite, got " + std::to_string(p.softmax_scale);
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
  return dispatch(p, ws, stream);
}

}  // namespace fa4::hopper
