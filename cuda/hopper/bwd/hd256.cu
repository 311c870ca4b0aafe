// The hd256 backward: BwdHd256 (64 x 80 blocks) for {bf16, fp16} x {dense, causal, variant, variant with soft
// cap}.
#include "hopper/bwd/launch_config.cuh"

namespace fa4::hopper {
template std::string launch_bwd_config<BwdHd256>(const BwdProblem&, const BwdWorkspace&, cudaStream_t,
                                                 const BwdSchedule&);
}  // namespace fa4::hopper
