// Release/acquire accesses of a global int at GPU scope (PTX `ld.acquire.gpu`, `st.release.gpu`):
// the flag handshake between CTAs of one grid (the deterministic backward's dQ semaphores).
#pragma once
#include <cstdint>

namespace fa4::hopper {

// Reads *flag at GPU scope (never a stale L1 copy); no later access of this thread is performed
// before it, so what the thread that released the value wrote before releasing is visible.
__device__ __forceinline__ int ld_acquire_gpu(const int* flag) {
  int v;
  asm volatile("ld.acquire.gpu.global.s32 %0, [%1];" : "=r"(v) : "l"(flag) : "memory");
  return v;
}

// Writes *flag = v at GPU scope after every earlier access of this thread (and, cumulatively, every
// access it has observed, e.g. through a bar.sync) is visible at GPU scope.
__device__ __forceinline__ void st_release_gpu(int* flag, int v) {
  asm volatile("st.release.gpu.global.s32 [%0], %1;" ::"l"(flag), "r"(v) : "memory");
}

}  // namespace fa4::hopper
