// Non-tensor bulk copy wrapper (PTX `cp.async.bulk.shared::cluster.global`): a contiguous run of
// bytes from global to shared memory by the copy engine, no tensor map. tma.cuh has the tensor
// (boxed, swizzled) form; this one moves short float vectors (the backward's lse and delta rows).
#pragma once
#include <cstdint>

#include "hopper/ptx/mbarrier.cuh"

namespace fa4::hopper {

// Copies `bytes` (a multiple of 16; both addresses 16-byte aligned) from global `src` to shared
// `dst`; on completion the bytes are credited to `bar` (whose phase must expect them).
__device__ __forceinline__ void bulk_load_1d(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
          smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(src)), "r"(bytes), "r"(smem_addr(bar))
      : "memory");
}

}  // namespace fa4::hopper

namespace fa4::hopper {

// Adds `bytes` (a multiple of 16; both addresses 16-byte aligned) of float32 from shared `src` to
// global `dst` element by element (PTX `cp.reduce.async.bulk .add.f32`: performed in L2, each
// element atomic, order between CTAs not fixed). Completion is tracked by this thread's bulk
// groups: commit with bulk_commit(), then bulk_wait_read() before `src` is written again and
// bulk_wait_all() before the CTA exits.
__device__ __forceinline__ void bulk_reduce_add_f32(float* dst, const float* src, uint32_t bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;" ::"l"(
                   reinterpret_cast<uint64_t>(dst)),
               "r"(smem_addr(src)), "r"(bytes)
               : "memory");
}

__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }

// Every committed bulk group of this thread has finished reading its shared-memory source.
__device__ __forceinline__ void bulk_wait_read() { asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory"); }

// Every committed bulk group of this thread has completed (its global writes performed).
__device__ __forceinline__ void bulk_wait_all() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }

}  // namespace fa4::hopper
