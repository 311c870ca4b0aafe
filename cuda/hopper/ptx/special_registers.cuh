// Special registers (PTX `%globaltimer`, `%smid`, `%tid`).
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

// threadIdx.x read afresh at each use (volatile): a test on it is recomputed where it is needed
// instead of held in a register across a loop that has none to spare.
__device__ __forceinline__ uint32_t thread_index_x() {
  uint32_t t;
  asm volatile("mov.u32 %0, %%tid.x;" : "=r"(t));
  return t;
}

}  // namespace fa4::hopper
