// The backward's phase probe (a diagnostic build, FA4_BWD_PHASE_PROBE=1, args.cuh): in the hd64 /
// hd128 grid kernel, one thread per role writes the globaltimer (ns) when its CTA reaches each
// event into args.probe[cta * kBwdProbeEvents + event], cta the linear block index. The harness
// (tests/gpu/cuda/bwd_kernel_check.cu, --probe) turns that into time per phase, the gap between
// two CTAs on an SM and the last wave's tail. In shipped builds bwd_probe_mark is not called.
#pragma once
#include <cstdint>

#include "hopper/bwd/args.cuh"
#include "hopper/ptx/special_registers.cuh"

namespace fa4::hopper {

constexpr bool kBwdPhaseProbe = FA4_BWD_PHASE_PROBE != 0;

enum BwdProbeEvent : int {
  kBwdProbeEntry,      // thread 0 at kernel entry
  kBwdProbeSm,         // (the SM id, not a time)
  kBwdProbeSetup,      // thread 0 past the barrier init and the grid-dependency wait
  kBwdProbeKv,         // consumer warpgroup 0, thread 0: K and V landed
  kBwdProbeFirstStep,  // ... the first step's P / dS done (its dK / dV products issued)
  kBwdProbeLoopEnd,    // ... every step but the last done
  kBwdProbeLastDq,     // ... the last step's dQ staged
  kBwdProbeDvOut,      // ... dV stored
  kBwdProbeDkOut,      // ... dK stored (the consumer's end)
  kBwdProbeSteps,      // (the tile's steps, not a time)
  kBwdProbeWriterEnd,  // the dQ writer's lane 0 past its last wait
  kBwdProbeEvents
};

// Records `event` for this CTA: the globaltimer, or `value` when given (the SM id, the steps).
__device__ __forceinline__ void bwd_probe_mark(const BwdArgs& args, int event, long long value = -1) {
#if FA4_BWD_PHASE_PROBE
  if (args.probe == nullptr) return;
  if (value < 0) value = globaltimer_ns();
  const long long cta = blockIdx.x + int64_t(gridDim.x) * (blockIdx.y + int64_t(gridDim.y) * blockIdx.z);
  if (cta < args.probe_ctas) args.probe[cta * kBwdProbeEvents + event] = value;
#else
  (void)args, (void)event, (void)value;
#endif
}

}  // namespace fa4::hopper
