// The library's forward configurations for head dim 128 (bf16 and fp16; dense, causal, variant and
// soft-capped variant kernels) and the heuristic between them.
#include "hopper/fwd/heuristics.h"
#include "hopper/fwd/launch.cuh"

namespace fa4::hopper {
template std::string launch_fwd_config<FwdHd128>(const FwdProblem&, cudaStream_t, const FwdScheduleParams&);
template std::string launch_fwd_config<FwdHd128Persistent>(const FwdProblem&, cudaStream_t, const FwdScheduleParams&);

std::string launch_fwd_hd128(const FwdProblem& p, cudaStream_t stream) {
  if (fwd_use_persistent(p, fwd_kernel_kind(p) == MaskKind::kVariant))
    return launch_fwd_config<FwdHd128Persistent>(p, stream);
  return launch_fwd_config<FwdHd128>(p, stream);
}
}  // namespace fa4::hopper
