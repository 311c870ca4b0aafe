// stmatrix (PTX `stmatrix.sync.aligned.m8n8.x4.shared.b16`): a warp stores four 8 x 8 16-bit
// matrices held in the mma accumulator-fragment layout with one instruction per thread.
#pragma once
#include <cstdint>

namespace fa4::hopper {

// Stores four 8 x 8 b16 matrices: register k of thread t holds row t / 4, columns 2 (t % 4) and
// 2 (t % 4) + 1 of matrix k; lane l supplies the shared address of row l % 8 of matrix l / 8 (16
// contiguous bytes, 16-byte aligned). Warp-collective (all 32 lanes, converged).
__device__ __forceinline__ void stmatrix_x4(uint32_t row_addr, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(row_addr), "r"(r0), "r"(r1),
               "r"(r2), "r"(r3)
               : "memory");
}

// The same four matrices stored transposed (.trans): row r of stored matrix k is column r of
// fragment k, so lane l supplies the address of what becomes row l % 8 of matrix l / 8 (column
// l % 8 of the fragment). Turns a 64 x N accumulator into its N x 64 transpose in shared memory.
__device__ __forceinline__ void stmatrix_x4_trans(uint32_t row_addr, uint32_t r0, uint32_t r1, uint32_t r2,
                                                  uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(row_addr), "r"(r0),
               "r"(r1), "r"(r2), "r"(r3)
               : "memory");
}

// Two matrices, transposed: lanes 0-15 supply the row addresses (row l % 8 of matrix l / 8).
__device__ __forceinline__ void stmatrix_x2_trans(uint32_t row_addr, uint32_t r0, uint32_t r1) {
  asm volatile("stmatrix.sync.aligned.m8n8.x2.trans.shared.b16 [%0], {%1, %2};" ::"r"(row_addr), "r"(r0), "r"(r1)
               : "memory");
}

}  // namespace fa4::hopper
