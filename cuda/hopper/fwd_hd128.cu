// Instantiations for head dim 128: {bf16, fp16} x {causal, not}.
#include "hopper/fwd_kernel.cuh"

namespace fa4::hopper {
std::string launch_fwd_hd128(const FwdProblem& p, cudaStream_t stream) { return launch_fwd_head_dim<128>(p, stream); }
}  // namespace fa4::hopper
