// Non-tensor bulk copy wrapper (PTX `cp.async.bulk.shared::cluster.global`): a contiguous run of
// bytes from global to shared memory by the copy engine, no tensor map. tma.cuh has the tensor
// (boxed, swizzled) form; this one moves short float vectors (the backward's lse and delta rows).
#pragma once
#include <cstdint>

#include "hopper/mbarrier.cuh"

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
