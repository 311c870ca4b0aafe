// Backward instantiations for head dim 64: {bf16, fp16} x {causal, not}.
#include "hopper/bwd_kernel.cuh"

namespace fa4::hopper {
std::string launch_bwd_hd64(const BwdProblem& p, const BwdWorkspace& ws, cudaStream_t stream) {
  return launch_bwd_head_dim<64>(p, ws, stream);
}
}  // namespace fa4::hopper
