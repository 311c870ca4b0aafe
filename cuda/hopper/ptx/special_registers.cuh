// Special registers read for diagnostics (PTX `%globaltimer`, `%smid`).
#pragma once
#include <cstdint>

namespace fa4::hopper {

// The GPU-wide nanosecond timer; comparable across SMs, updated coarsely (about every microsecond).
__device__ __forceinline__ long long globaltimer_ns() {
  long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// The SM this thread runs on (stable for the thread's lifetime, not across launches).
__device__ __forceinline__ uint32_t sm_id() {
  uint32_t sm;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
  return sm;
}

}  // namespace fa4::hopper
