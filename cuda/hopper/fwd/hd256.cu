// The library's forward configuration for head dim 256 (bf16 and fp16; dense, causal, variant and
// soft-capped variant kernels).
#include "hopper/fwd/heuristics.h"
#include "hopper/fwd/launch.cuh"

namespace fa4::hopper {
template std::string launch_fwd_config<FwdHd256>(const FwdProblem&, cudaStream_t, const FwdScheduleParams&);

std::string launch_fwd_hd256(const FwdProblem& p, cudaStream_t stream) { return launch_fwd_config<FwdHd256>(p, stream); }
}  // namespace fa4::hopper
