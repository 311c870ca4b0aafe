// Validation and head-dim dispatch for the forward kernel.
#include <climits>

#include "hopper/fwd_launch.h"

namespace fa4::hopper {

namespace {
std::string dispatch_head_dim(const FwdProblem& p, cudaStream_t stream) {
  switch (p.head_dim) {
    case 64: return launch_fwd_hd64(p, stream);
    case 128: return launch_fwd_hd128(p, stream);
    default: return launch_fwd_hd256(p, stream);
  }
}
}  // namespace

std::string launch_fwd(const FwdProblem& p, cudaStream_t stream) { return launch_fwd_checked(p, stream, dispatch_head_dim); }

std::string launch_fwd_checked(const FwdProblem& p, cudaStream_t stream, FwdDispatch dispatch) {
  auto s = [](int64_t v) { return std::to_string(v); };
  if (p.batch < 0 || p.seq_q < 0 || p.seq_k < 0 || p.heads_q < 0 || p.heads_kv < 0)
    return "negative dimension";
  if (p.head_dim != 64 && p.head_dim != 128 && p.head_dim != 256)
    return "head_dim " + s(p.head_dim) + " is not supported by the Hopper kernel (supported: 64, 128, 256)";
  if (p.heads_kv == 0 ? p.heads_q != 0 : p.heads_q % p.heads_kv != 0)
    return "heads_q (" + s(p.heads_q) + ") must be a multiple of heads_kv (" + s(p.heads_kv) + ")";
  if (p.seq_q > INT_MAX || p.seq_k > INT_MAX)
    return "sequence length over 2^31-1 (seq_q " + s(p.seq_q) + ", seq_k " + s(p.seq_k) + ")";
  if (p.batch > 65535 || p.heads_q > 65535)
    return "batch (" + s(p.batch) + ") and heads (" + s(p.heads_q) + ") must each be at most 65535";
  if (!(p.softmax_scale > 0.f) || p.softmax_scale == INFINITY)
    return "softmax_scale must be positive and finite, got " + std::to_string(p.softmax_scale);
  if (p.batch == 0 || p.seq_q == 0 || p.heads_q == 0) return {};  // empty output: nothing to do
  for (const void* ptr : {p.q, p.k, p.v, static_cast<const void*>(p.o)}) {
    if (reinterpret_cast<uintptr_t>(ptr) % 16 != 0) return "q, k, v and o must be 16-byte aligned for TMA";
  }
  return dispatch(p, stream);
}

}  // namespace fa4::hopper
