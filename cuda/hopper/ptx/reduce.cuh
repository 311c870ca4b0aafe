// Global-memory reduction wrapper (PTX `red.global.add`): fire-and-forget atomic adds performed in
// L2. Each add is atomic per element; the ORDER of adds from different threads is not fixed, so
// float sums built this way are not bitwise reproducible (the deterministic backward must order
// them, e.g. with a semaphore per tile).
#pragma once
#include <cstdint>

namespace fa4::hopper {

// *(addr) += a; *(addr + 1) += b as one 8-byte vector reduction (sm_90); addr 8-byte aligned.
__device__ __forceinline__ void red_add_f32x2(float* addr, float a, float b) {
  asm volatile("red.global.add.v2.f32 [%0], {%1, %2};" ::"l"(addr), "f"(a), "f"(b) : "memory");
}

// The same for four floats (16-byte aligned address; sm_90).
__device__ __forceinline__ void red_add_f32x4(float* addr, float a, float b, float c, float d) {
  asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(addr), "f"(a), "f"(b), "f"(c), "f"(d)
               : "memory");
}

}  // namespace fa4::hopper
