// Backward instantiations for head dim 128: {bf16, fp16} x {causal, not}.
#include "hopper/bwd_kernel.cuh"

namespace fa4::hopper {
std::string launch_bwd_hd128(const BwdProblem& p, const BwdWorkspace& ws, cudaStream_t stream) {
  return launch_bwd_head_dim<128>(p, ws, stream);
}
}  // namespace fa4::hopper
