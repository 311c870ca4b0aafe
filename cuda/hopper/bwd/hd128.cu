// The hd128 backward: BwdHd128 for {bf16, fp16} x {dense, causal, variant, variant with soft cap},
// BwdHd128Rows80 for {bf16, fp16} x dense, BwdHd128Persistent for {bf16, fp16} x {dense, causal}.
#include "hopper/bwd/launch_config.cuh"

namespace fa4::hopper {
template std::string launch_bwd_config<BwdHd128>(const BwdProblem&, const BwdWorkspace&, cudaStream_t,
                                                 const BwdSchedule&);
template std::string launch_bwd_config<BwdHd128Rows80>(const BwdProblem&, const BwdWorkspace&, cudaStream_t,
                                                       const BwdSchedule&);
template std::string launch_bwd_config<BwdHd128Persistent>(const BwdProblem&, const BwdWorkspace&, cudaStream_t,
                                                           const BwdSchedule&);
}  // namespace fa4::hopper
