// Numeric helpers shared by the Hopper kernels: 16-bit pair packing, the wgmma dtype tag, the
// special-function-unit 2^x and its FMA-pipe emulation, the 128-byte-swizzle address of a tile element.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "hopper/ptx/wgmma_mma.cuh"

namespace fa4::hopper {

// The wgmma operand type tag (ptx/wgmma_mma.cuh) of a 16-bit element type.
template <class T> struct WgmmaTag;
template <> struct WgmmaTag<__nv_bfloat16> { using type = Bf16; };
template <> struct WgmmaTag<__half> { using type = F16; };

// tanh by the special function unit (tanh.approx.f32, sm_75+): relative error about 2^-11, the
// soft cap's only transcendental besides the softmax's exp2.
__device__ __forceinline__ float tanh_approx(float x) {
  float y;
  asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Two floats rounded to T and packed into one 32-bit register (lo in the low half).
template <class T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  } else {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
}

// The inverse of pack2: two 16-bit values to floats (lo, hi).
template <class T>
__device__ __forceinline__ float2 unpack2(uint32_t v) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&v));
  } else {
    return __half22float2(*reinterpret_cast<const __half2*>(&v));
  }
}

// 2^x on the special-function unit (MUFU.EX2); 2^-inf = +0.
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// 2^(t a - k) on the FMA pipe (no MUFU), for k integer-valued and x = t a - k in [-126, 127]:
// one FMA both forms x and rounds it to an integer n (k, an integer, is exact inside the 1.5 * 2^23
// shift, whose ulp is 1), a second forms f = x - n in [-1/2, 1/2] with one rounding (k + n is
// exact), a degree-3 polynomial gives 2^f (relative error 1.0e-4, below bf16's half ulp) and n is
// added to its exponent field. 7 instructions with the shift hoisted; -inf is outside the range.
__device__ __forceinline__ float exp2_fma_affine(float t, float a, float k) {
  constexpr float kRoundShift = 12582912.f;  // 1.5 * 2^23
  const float base = kRoundShift - k;
  const float shifted = __fmaf_rn(t, a, base);  // 1.5 * 2^23 + n, n = round(x)
  const float f = __fmaf_rn(t, a, __fsub_rn(base, shifted));
  float p = __fmaf_rn(f, 0.0550090596f, 0.242210969f);
  p = __fmaf_rn(p, f, 0.693282902f);
  p = __fmaf_rn(p, f, 1.f);
  return __int_as_float(__float_as_int(p) + (__float_as_int(shifted) << 23));
}

// Byte offset of element (row, col) in a tile stored as 64-column chunks of `chunk_bytes`, rows
// of 128 bytes, 128-byte swizzle (the 16-byte unit index XORed with row % 8): the layout TMA
// writes with CU_TENSOR_MAP_SWIZZLE_128B and the wgmma sw128 descriptors read. The tile base must
// be 1024-byte aligned.
__device__ __forceinline__ uint32_t sw128_offset(int row, int col, uint32_t chunk_bytes) {
  const int c = col % 64;
  return uint32_t(col / 64) * chunk_bytes + uint32_t(row) * 128 + uint32_t(((c / 8) ^ (row % 8)) * 16) +
         uint32_t(c % 8) * 2;
}

}  // namespace fa4::hopper
