// Shared-memory matrix loads for warp-level MMAs (PTX `ldmatrix`).
#pragma once
#include <cstdint>

#include "hopper/ptx/mbarrier.cuh"

namespace fa4::hopper {

// Four 8x8 16-bit matrices, one 16-byte row address per lane (lanes 8k..8k+7 give matrix k's
// rows); register k of every lane gets its two elements of matrix k in the mma.sync fragment
// order (row lane / 4, columns 2 (lane % 4) and +1).
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* row_addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(row_addr)));
}

// The same four matrices transposed: register k holds matrix k's column lane / 4, rows
// 2 (lane % 4) and +1 (a row-major [k][n] tile read as the column-major B operand).
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row_addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(row_addr)));
}

}  // namespace fa4::hopper
