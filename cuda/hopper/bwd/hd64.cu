// The hd64 backward: BwdHd64 for {bf16, fp16} x {dense, causal, variant, variant with soft
// cap}.
#include "hopper/bwd/launch_config.cuh"

namespace fa4::hopper {
template std::string launch_bwd_config<BwdHd64>(const BwdProblem&, const BwdWorkspace&, cudaStream_t,
                                                const BwdSchedule&);
template std::string launch_bwd_config<BwdHd64Persistent>(const BwdProblem&, const BwdWorkspace&, cudaStream_t,
                                                          const BwdSchedule&);
}  // namespace fa4::hopper
