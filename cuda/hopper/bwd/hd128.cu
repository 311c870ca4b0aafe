// The hd128 backward: BwdHd128 and BwdHd128Persistent for {bf16, fp16} x {causal, not}.
#include "hopper/bwd/launch_config.cuh"

namespace fa4::hopper {
template std::string launch_bwd_config<BwdHd128>(const BwdProblem&, const BwdWorkspace&, cudaStream_t,
                                                 const BwdSchedule&);
template std::string launch_bwd_config<BwdHd128Persistent>(const BwdProblem&, const BwdWorkspace&, cudaStream_t,
                                                           const BwdSchedule&);
}  // namespace fa4::hopper
