// Fences, named barriers and register reallocation (PTX `fence.proxy.async`, `bar.*`, `setmaxnreg`).
#pragma once
#include <cstdint>

namespace fa4::hopper {

// Orders this thread's generic-proxy shared-memory writes before later async-proxy (TMA, wgmma)
// accesses; needed before a TMA store reads what st.shared wrote.
__device__ __forceinline__ void fence_proxy_async_smem() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// Orders this thread's generic-proxy global-memory accesses against its async-proxy ones (bulk
// copies and reductions) in both directions.
__device__ __forceinline__ void fence_proxy_async_global() {
  asm volatile("fence.proxy.async.global;" ::: "memory");
}

// Waits at hardware barrier `id` until `threads` threads (a multiple of 32) have arrived or synced.
__device__ __forceinline__ void named_barrier_sync(uint32_t id, uint32_t threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// Counts this warp's arrival at barrier `id` without waiting.
__device__ __forceinline__ void named_barrier_arrive(uint32_t id, uint32_t threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// Raises this warpgroup's per-thread register limit (blocks until the pool has them).
template <uint32_t Regs>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(Regs));
}

// Lowers this warpgroup's per-thread register limit, returning registers to the CTA pool.
template <uint32_t Regs>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(Regs));
}

}  // namespace fa4::hopper
