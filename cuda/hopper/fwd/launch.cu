// The forward's validation and head-dim dispatch to the library's configurations.
#include <cstdint>

#include "hopper/decode/launch.h"
#include "hopper/fwd/launch.h"

namespace fa4::hopper {

std::string launch_fwd_hd64(const FwdProblem& p, cudaStream_t stream);   // fwd/hd64.cu
std::string launch_fwd_hd128(const FwdProblem& p, cudaStream_t stream);  // fwd/hd128.cu
std::string launch_fwd_hd256(const FwdProblem& p, cudaStream_t stream);  // fwd/hd256.cu

std::string check_fwd_problem(const FwdProblem& p, bool* nothing_to_do) {
  *nothing_to_do = false;
  if (std::string err = check_problem_shape(p); !err.empty()) return err;
  if (p.batch == 0 || p.seq_q == 0 || p.heads_q == 0) {
    *nothing_to_do = true;  // empty output
    return {};
  }
  for (const void* ptr : {p.q, p.k, p.v, static_cast<const void*>(p.o)}) {
    if (reinterpret_cast<uintptr_t>(ptr) % 16 != 0) return "q, k, v and o must be 16-byte aligned for TMA";
  }
  return {};
}

std::string launch_fwd(const FwdProblem& p, cudaStream_t stream) {
  bool nothing_to_do = false;
  if (std::string err = check_fwd_problem(p, &nothing_to_do); !err.empty() || nothing_to_do) return err;
  // A few query rows per kv head against the cache: the split-KV decode path (decode/plan.h).
  if (const DecodePlan plan = decode_plan(p); plan.use) return launch_decode(p, plan, stream);
  switch (p.head_dim) {
    case 64: return launch_fwd_hd64(p, stream);
    case 128: return launch_fwd_hd128(p, stream);
    default: return launch_fwd_hd256(p, stream);
  }
}

}  // namespace fa4::hopper
