// Dense float32 tile arithmetic for the CPU kernels: a register-blocked matmul, a vectorisable
// exp2, transposes. Inline: JAX_FA4_HOT callers flatten them into their AVX2 clones.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace jax_fa4::cpu {

// Eight floats as one value (GCC/Clang vector extension): an AVX register in the AVX2 clones,
// two SSE registers elsewhere. aligned(4) + may_alias: loads from any float pointer are allowed.
typedef float f32x8 __attribute__((vector_size(32), aligned(4), may_alias));

inline f32x8 load8(const float* p) { return *reinterpret_cast<const f32x8*>(p); }
inline void store8(float* p, f32x8 v) { *reinterpret_cast<f32x8*>(p) = v; }

// Which terms a_rp * b_p of C = A B a product keeps. A masked term is skipped, never multiplied by
// a zero: 0 * NaN and 0 * Inf are NaN, and a query row must not depend on a key it cannot see
// (nor a key on a query that cannot see it), whatever values that key or query holds.
// The mask is a block's visibility: vis[q * kVisStride + k] != 0 iff query q sees key k.
//   kAll:       every term.
//   kQueryRows: rows are queries, the inner index runs over keys (P V, dS K): term (r, p) iff
//               vis[r][p].
//   kKeyRows:   rows are keys, the inner index runs over queries (P^T dO, dS^T Q): term (r, p)
//               iff vis[p][r].
// Kept terms are summed in the same order as kAll's, so where nothing is masked, or the masked
// terms' factors are finite (their products are then +-0), both give the same values.
enum class Keep { kAll, kQueryRows, kKeyRows };

constexpr int64_t kVisStride = 64;  // keys per visibility row (the CPU kernels' key block)

template <Keep K>
inline bool kept(const uint8_t* vis, int64_t row, int64_t p) {
  if constexpr (K == Keep::kQueryRows) return vis[row * kVisStride + p] != 0;
  if constexpr (K == Keep::kKeyRows) return vis[p * kVisStride + row] != 0;
  return true;
}

// Inner-dimension chunk of one register-resident partial sum: float32 rounding error then grows
// with kChunk + inner / kChunk terms instead of `inner` (blocked summation, as BLAS does).
constexpr int64_t kChunk = 32;

// C (+)= A B for R rows and 16 columns: A [R][inner] (row stride lda), B [inner][16.. of ldb],
// C [R][16.. of ldc]. Each chunk's R x 16 partial sums stay in registers. row0: the index of A's
// first row (for the mask `vis`, unused with kAll).
template <int R, Keep K = Keep::kAll>
inline void matmul_rx16(const float* a, int64_t lda, const float* b, int64_t ldb, float* c,
                        int64_t ldc, int64_t inner, bool accumulate, const uint8_t* vis = nullptr,
                        int64_t row0 = 0) {
  f32x8 acc[R][2];
  for (int r = 0; r < R; ++r) {
    acc[r][0] = accumulate ? load8(c + r * ldc) : f32x8{};
    acc[r][1] = accumulate ? load8(c + r * ldc + 8) : f32x8{};
  }
  for (int64_t p0 = 0; p0 < inner; p0 += kChunk) {
    const int64_t p1 = std::min(inner, p0 + kChunk);
    f32x8 part[R][2] = {};
    for (int64_t p = p0; p < p1; ++p) {
      const f32x8 b0 = load8(b + p * ldb);
      const f32x8 b1 = load8(b + p * ldb + 8);
      for (int r = 0; r < R; ++r) {
        if (!kept<K>(vis, row0 + r, p)) continue;
        const f32x8 ar = f32x8{} + a[r * lda + p];
        part[r][0] += ar * b0;
        part[r][1] += ar * b1;
      }
    }
    for (int r = 0; r < R; ++r) {
      acc[r][0] += part[r][0];
      acc[r][1] += part[r][1];
    }
  }
  for (int r = 0; r < R; ++r) {
    store8(c + r * ldc, acc[r][0]);
    store8(c + r * ldc + 8, acc[r][1]);
  }
}

// The same for R rows and the last `w` < 16 columns (scalar; only odd head dims reach it).
template <int R, Keep K = Keep::kAll>
inline void matmul_rx_tail(const float* a, int64_t lda, const float* b, int64_t ldb, float* c,
                           int64_t ldc, int64_t inner, int64_t w, bool accumulate,
                           const uint8_t* vis = nullptr, int64_t row0 = 0) {
  for (int r = 0; r < R; ++r)
    for (int64_t jj = 0; jj < w; ++jj) {
      float acc = accumulate ? c[r * ldc + jj] : 0.0f;
      for (int64_t p0 = 0; p0 < inner; p0 += kChunk) {
        float part = 0.0f;
        for (int64_t p = p0; p < std::min(inner, p0 + kChunk); ++p)
          if (kept<K>(vis, row0 + r, p)) part += a[r * lda + p] * b[p * ldb + jj];
        acc += part;
      }
      c[r * ldc + jj] = acc;
    }
}

template <int R, Keep K>
inline void matmul_rows(const float* a, int64_t lda, const float* b, int64_t ldb, float* c,
                        int64_t ldc, int64_t inner, int64_t cols, bool accumulate,
                        const uint8_t* vis, int64_t row0) {
  int64_t j0 = 0;
  for (; j0 + 16 <= cols; j0 += 16)
    matmul_rx16<R, K>(a, lda, b + j0, ldb, c + j0, ldc, inner, accumulate, vis, row0);
  if (j0 < cols)
    matmul_rx_tail<R, K>(a, lda, b + j0, ldb, c + j0, ldc, inner, cols - j0, accumulate, vis,
                         row0);
}

// C [rows][cols] (+)= A [rows][inner] B [inner][cols], all row-major with the given strides,
// keeping the terms K says (vis: see Keep; unused with kAll).
template <Keep K = Keep::kAll>
inline void matmul(const float* a, int64_t lda, const float* b, int64_t ldb, float* c,
                   int64_t ldc, int64_t rows, int64_t inner, int64_t cols, bool accumulate,
                   const uint8_t* vis = nullptr) {
  int64_t i = 0;
  for (; i + 4 <= rows; i += 4)
    matmul_rows<4, K>(a + i * lda, lda, b, ldb, c + i * ldc, ldc, inner, cols, accumulate, vis,
                      i);
  for (; i < rows; ++i)
    matmul_rows<1, K>(a + i * lda, lda, b, ldb, c + i * ldc, ldc, inner, cols, accumulate, vis,
                      i);
}

// dst [cols][rows] = src [rows][cols] (src row stride lds, dst row stride ldd).
inline void transpose(const float* src, int64_t lds, int64_t rows, int64_t cols, float* dst,
                      int64_t ldd) {
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) dst[j * ldd + i] = src[i * lds + j];
}

// 2^x to about one float32 ulp for x <= 0 (and 0 for x <= -127, -inf included): 2^round(x) from
// the exponent bits times a degree-7 Taylor polynomial of 2^f on |f| <= 1/2. Plain arithmetic, so
// loops over it vectorise (std::exp2 does not without -ffast-math).
inline float exp2_approx(float x) {
  x = std::max(x, -127.0f);
  const float xi = static_cast<float>(static_cast<int32_t>(x - 0.5f));  // round half down, x <= 0
  const float f = x - xi;
  constexpr float c1 = 0.6931471805599453f, c2 = 0.2402265069591007f, c3 = 0.05550410866482158f,
                  c4 = 0.009618129107628477f, c5 = 0.0013333558146428443f,
                  c6 = 1.5403530393381606e-4f, c7 = 1.5252733804059837e-5f;
  const float p = 1.0f + f * (c1 + f * (c2 + f * (c3 + f * (c4 + f * (c5 + f * (c6 + f * c7))))));
  const uint32_t bits = static_cast<uint32_t>(static_cast<int32_t>(xi) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return p * scale;
}

// tanh to about two float32 ulps, branch-free so that loops over it vectorise (std::tanh does
// not): for |x| < 0.625 an odd polynomial, x * P(x^2) with P a least-squares fit of tanh(x) / x
// on that range; beyond it (1 - e) / (1 + e) with e = exp(-2|x|) <= 0.29, whose subtraction
// cancels nothing. A NaN stays NaN (it selects the polynomial); +-Inf gives +-1.
inline float tanh_approx(float x) {
  constexpr float kLog2e = 1.4426950408889634f;
  const float a = std::fabs(x);
  const float u = a * a;
  constexpr float c1 = -0.3333328068256378f, c2 = 0.13331381976604462f, c3 = -0.05373531952500343f,
                  c4 = 0.020626291632652283f, c5 = -0.005691985599696636f;
  const float poly = a * (1.0f + u * (c1 + u * (c2 + u * (c3 + u * (c4 + u * c5)))));
  // |x| >= 44 is 1 in float32 anyway; clamping keeps exp2_approx's argument finite for NaN.
  const float e = exp2_approx(-2.0f * kLog2e * (a < 44.0f ? a : 44.0f));
  const float big = (1.0f - e) / (1.0f + e);
  return std::copysign(!(a >= 0.625f) ? poly : big, x);
}

// Eight partial sums so the compiler can vectorise without reassociating (no -ffast-math).
inline float row_sum(const float* x, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) acc[j] += x[i + j];
  float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; i < n; ++i) s += x[i];
  return s;
}

inline float row_max(const float* x, int64_t n, float init) {
  float acc[8] = {init, init, init, init, init, init, init, init};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) acc[j] = std::max(acc[j], x[i + j]);
  float m = std::max(std::max(std::max(acc[0], acc[1]), std::max(acc[2], acc[3])),
                     std::max(std::max(acc[4], acc[5]), std::max(acc[6], acc[7])));
  for (; i < n; ++i) m = std::max(m, x[i]);
  return m;
}


}  // namespace jax_fa4::cpu
