// CPU forward and backward: tiles are converted to float32, then float kernels do the math.
#include "cpu/attention_cpu.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "cpu/parallel_for.h"

// AVX2/FMA versions of the hot loops, picked at load time, where the toolchain supports ifuncs.
#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__) && !defined(__clang__)
#define JAX_FA4_HOT __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define JAX_FA4_HOT
#endif

namespace jax_fa4::cpu {
namespace {

constexpr int64_t kBlockQ = 64;
constexpr int64_t kBlockK = 128;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Eight partial sums so the compiler can vectorise without reassociating (no -ffast-math).
inline float dot(const float* a, const float* b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
  float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

inline void axpy(float alpha, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

// Last key index (exclusive) that query row i may see.
inline int64_t key_end(const AttentionShape& s, bool causal, int64_t i) {
  if (!causal) return s.seq_k;
  return std::clamp<int64_t>(i + s.seq_k - s.seq_q + 1, 0, s.seq_k);
}

// Loads rows [r0, r0+n) of head `head` of a [seq, heads, dim] slab into a dense float tile.
void load_rows(ElementType type, const void* base, int64_t heads, int64_t dim, int64_t head,
               int64_t r0, int64_t n, float* tile) {
  const int64_t eb = element_bytes(type);
  const auto* bytes = static_cast<const char*>(base);
  for (int64_t r = 0; r < n; ++r)
    load_as_float(type, bytes + ((r0 + r) * heads + head) * dim * eb, dim, tile + r * dim);
}

void store_rows(ElementType type, const float* tile, int64_t heads, int64_t dim, int64_t head,
                int64_t r0, int64_t n, void* base) {
  const int64_t eb = element_bytes(type);
  auto* bytes = static_cast<char*>(base);
  for (int64_t r = 0; r < n; ++r)
    store_from_float(type, tile + r * dim, dim, bytes + ((r0 + r) * heads + head) * dim * eb);
}

// One K/V block for `rows` query rows: the online-softmax update of (m, l, acc).
// m is the running max in log2 units (scores already multiplied by scale*log2e).
JAX_FA4_HOT void forward_block(const float* q, int64_t rows, const float* k, const float* v,
                               int64_t cols, int64_t d, int64_t dv, float scale_log2,
                               const int64_t* row_key_end, int64_t k0, float* s, float* m,
                               float* l, float* acc) {
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t visible = std::clamp<int64_t>(row_key_end[i] - k0, 0, cols);
    if (visible == 0) continue;
    float* si = s + i * cols;
    float mx = m[i];
    for (int64_t j = 0; j < visible; ++j) {
      si[j] = dot(q + i * d, k + j * d, d) * scale_log2;
      mx = std::max(mx, si[j]);
    }
    const float alpha = std::exp2(m[i] - mx);  // m[i] = -inf at the start: alpha = 0
    float* acc_i = acc + i * dv;
    if (alpha != 1.0f) {
      for (int64_t c = 0; c < dv; ++c) acc_i[c] *= alpha;
    }
    float sum = 0.0f;
    for (int64_t j = 0; j < visible; ++j) {
      const float p = std::exp2(si[j] - mx);
      sum += p;
      axpy(p, v + j * dv, acc_i, dv);
    }
    l[i] = l[i] * alpha + sum;
    m[i] = mx;
  }
}

// dQ for `rows` query rows against one K/V block.
JAX_FA4_HOT void backward_dq_block(const float* q, const float* d_o, const float* delta,
                                   const float* dlse, const float* lse2, int64_t rows, const float* k, const float* v,
                                   int64_t cols, int64_t d, int64_t dv, float scale,
                                   float scale_log2, const int64_t* row_key_end, int64_t k0,
                                   float* dq) {
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t visible = std::clamp<int64_t>(row_key_end[i] - k0, 0, cols);
    if (visible == 0 || lse2[i] == kNegInf) continue;
    for (int64_t j = 0; j < visible; ++j) {
      const float p = std::exp2(dot(q + i * d, k + j * d, d) * scale_log2 - lse2[i]);
      const float dp = dot(d_o + i * dv, v + j * dv, dv);
      // (dp - delta) first: it cancels exactly where it should, then the lse cotangent enters.
      axpy(p * ((dp - delta[i]) + dlse[i]) * scale, k + j * d, dq + i * d, d);
    }
  }
}

// dK, dV for one K/V block against `rows` query rows.
JAX_FA4_HOT void backward_dkdv_block(const float* q, const float* d_o, const float* delta,
                                     const float* dlse, const float* lse2, int64_t rows, const float* k,
                                     const float* v, int64_t cols, int64_t d, int64_t dv,
                                     float scale, float scale_log2, const int64_t* row_key_end,
                                     int64_t k0, float* dk, float* dvv) {
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t visible = std::clamp<int64_t>(row_key_end[i] - k0, 0, cols);
    if (visible == 0 || lse2[i] == kNegInf) continue;
    for (int64_t j = 0; j < visible; ++j) {
      const float p = std::exp2(dot(q + i * d, k + j * d, d) * scale_log2 - lse2[i]);
      const float dp = dot(d_o + i * dv, v + j * dv, dv);
      axpy(p, d_o + i * dv, dvv + j * dv, dv);
      axpy(p * ((dp - delta[i]) + dlse[i]) * scale, q + i * d, dk + j * d, d);
    }
  }
}

int64_t num_blocks(int64_t n, int64_t block) { return (n + block - 1) / block; }

}  // namespace

void attention_forward(ElementType type, const AttentionShape& s, const AttentionOptions& opts,
                       const void* q, const void* k, const void* v, void* o, float* lse) {
  const int64_t eb = element_bytes(type);
  const int64_t q_blocks = num_blocks(s.seq_q, kBlockQ);
  const int64_t group = s.heads_q / s.heads_kv;
  const float scale_log2 = opts.softmax_scale * kLog2e;
  parallel_for(s.batch * s.heads_q * q_blocks, [&](int64_t task) {
    const int64_t qb = task % q_blocks;
    const int64_t h = (task / q_blocks) % s.heads_q;
    const int64_t b = task / (q_blocks * s.heads_q);
    const int64_t hk = h / group;
    const int64_t i0 = qb * kBlockQ;
    const int64_t rows = std::min(kBlockQ, s.seq_q - i0);
    std::vector<float> qt(rows * s.head_dim), kt(kBlockK * s.head_dim),
        vt(kBlockK * s.head_dim_v), st(rows * kBlockK), acc(rows * s.head_dim_v, 0.0f),
        m(rows, kNegInf), l(rows, 0.0f);
    std::vector<int64_t> kend(rows);
    int64_t block_end = 0;
    for (int64_t r = 0; r < rows; ++r) {
      kend[r] = key_end(s, opts.causal, i0 + r);
      block_end = std::max(block_end, kend[r]);
    }
    const char* qb_ptr = static_cast<const char*>(q) + b * s.seq_q * s.heads_q * s.head_dim * eb;
    const char* kb_ptr = static_cast<const char*>(k) + b * s.seq_k * s.heads_kv * s.head_dim * eb;
    const char* vb_ptr =
        static_cast<const char*>(v) + b * s.seq_k * s.heads_kv * s.head_dim_v * eb;
    load_rows(type, qb_ptr, s.heads_q, s.head_dim, h, i0, rows, qt.data());
    // Causal: key blocks past the last visible key of this query block are skipped entirely.
    for (int64_t k0 = 0; k0 < block_end; k0 += kBlockK) {
      const int64_t cols = std::min(kBlockK, s.seq_k - k0);
      load_rows(type, kb_ptr, s.heads_kv, s.head_dim, hk, k0, cols, kt.data());
      load_rows(type, vb_ptr, s.heads_kv, s.head_dim_v, hk, k0, cols, vt.data());
      forward_block(qt.data(), rows, kt.data(), vt.data(), cols, s.head_dim, s.head_dim_v,
                    scale_log2, kend.data(), k0, st.data(), m.data(), l.data(), acc.data());
    }
    for (int64_t r = 0; r < rows; ++r) {
      float* acc_r = acc.data() + r * s.head_dim_v;
      const int64_t lse_index = (b * s.heads_q + h) * s.seq_q + i0 + r;
      if (l[r] == 0.0f) {
        std::fill(acc_r, acc_r + s.head_dim_v, 0.0f);
        lse[lse_index] = kNegInf;
      } else {
        const float inv = 1.0f / l[r];
        for (int64_t c = 0; c < s.head_dim_v; ++c) acc_r[c] *= inv;
        lse[lse_index] = m[r] * kLn2 + std::log(l[r]);
      }
    }
    char* ob_ptr = static_cast<char*>(o) + b * s.seq_q * s.heads_q * s.head_dim_v * eb;
    store_rows(type, acc.data(), s.heads_q, s.head_dim_v, h, i0, rows, ob_ptr);
  });
}

namespace {

// Per-query-block inputs of the backward: Q, dO, delta = rowsum(dO * O), dlse, lse in log2 units.
struct QBlock {
  std::vector<float> q, d_o, o, delta, dlse_r, lse2;
  std::vector<int64_t> kend;
  int64_t rows = 0;
  int64_t block_end = 0;

  void load(ElementType type, const AttentionShape& s, bool causal, const void* qp,
            const void* op, const void* dop, const float* lse, const float* dlse, int64_t b,
            int64_t h,
            int64_t i0) {
    const int64_t eb = element_bytes(type);
    rows = std::min(kBlockQ, s.seq_q - i0);
    q.resize(rows * s.head_dim);
    d_o.resize(rows * s.head_dim_v);
    o.resize(rows * s.head_dim_v);
    delta.resize(rows);
    dlse_r.resize(rows);
    lse2.resize(rows);
    kend.resize(rows);
    const int64_t qoff = b * s.seq_q * s.heads_q * s.head_dim * eb;
    const int64_t ooff = b * s.seq_q * s.heads_q * s.head_dim_v * eb;
    load_rows(type, static_cast<const char*>(qp) + qoff, s.heads_q, s.head_dim, h, i0, rows,
              q.data());
    load_rows(type, static_cast<const char*>(dop) + ooff, s.heads_q, s.head_dim_v, h, i0, rows,
              d_o.data());
    load_rows(type, static_cast<const char*>(op) + ooff, s.heads_q, s.head_dim_v, h, i0, rows,
              o.data());
    block_end = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t row = (b * s.heads_q + h) * s.seq_q + i0 + r;
      delta[r] = dot(d_o.data() + r * s.head_dim_v, o.data() + r * s.head_dim_v, s.head_dim_v);
      dlse_r[r] = dlse[row];
      lse2[r] = lse[row] * kLog2e;
      kend[r] = key_end(s, causal, i0 + r);
      block_end = std::max(block_end, kend[r]);
    }
  }
};

}  // namespace

void attention_backward(ElementType type, const AttentionShape& s, const AttentionOptions& opts,
                        const void* q, const void* k, const void* v, const void* o,
                        const float* lse, const void* d_o, const float* dlse, void* dq, void* dk,
                        void* dv) {
  const int64_t eb = element_bytes(type);
  const int64_t q_blocks = num_blocks(s.seq_q, kBlockQ);
  const int64_t k_blocks = num_blocks(s.seq_k, kBlockK);
  const int64_t group = s.heads_q / s.heads_kv;
  const float scale = opts.softmax_scale;
  const float scale_log2 = scale * kLog2e;
  const int64_t kv_batch_stride = s.seq_k * s.heads_kv;

  // Pass 1: dQ, one task per (batch, q head, q block); recomputes P, no atomics, deterministic.
  parallel_for(s.batch * s.heads_q * q_blocks, [&](int64_t task) {
    const int64_t qb = task % q_blocks;
    const int64_t h = (task / q_blocks) % s.heads_q;
    const int64_t b = task / (q_blocks * s.heads_q);
    const int64_t hk = h / group;
    QBlock blk;
    blk.load(type, s, opts.causal, q, o, d_o, lse, dlse, b, h, qb * kBlockQ);
    std::vector<float> kt(kBlockK * s.head_dim), vt(kBlockK * s.head_dim_v),
        dqt(blk.rows * s.head_dim, 0.0f), part(blk.rows * s.head_dim);
    const char* kb_ptr = static_cast<const char*>(k) + b * kv_batch_stride * s.head_dim * eb;
    const char* vb_ptr = static_cast<const char*>(v) + b * kv_batch_stride * s.head_dim_v * eb;
    for (int64_t k0 = 0; k0 < blk.block_end; k0 += kBlockK) {
      const int64_t cols = std::min(kBlockK, s.seq_k - k0);
      load_rows(type, kb_ptr, s.heads_kv, s.head_dim, hk, k0, cols, kt.data());
      load_rows(type, vb_ptr, s.heads_kv, s.head_dim_v, hk, k0, cols, vt.data());
      // Each block's sum lands in a zeroed partial first: blocked summation keeps float32 error
      // growing with the number of blocks, not of keys.
      std::fill(part.begin(), part.end(), 0.0f);
      backward_dq_block(blk.q.data(), blk.d_o.data(), blk.delta.data(), blk.dlse_r.data(),
                        blk.lse2.data(), blk.rows, kt.data(), vt.data(), cols, s.head_dim,
                        s.head_dim_v, scale, scale_log2, blk.kend.data(), k0, part.data());
      for (size_t x = 0; x < part.size(); ++x) dqt[x] += part[x];
    }
    char* dqb = static_cast<char*>(dq) + b * s.seq_q * s.heads_q * s.head_dim * eb;
    store_rows(type, dqt.data(), s.heads_q, s.head_dim, h, qb * kBlockQ, blk.rows, dqb);
  });

  // Pass 2: dK and dV, one task per (batch, kv head, k block), summed over the q heads of its group.
  parallel_for(s.batch * s.heads_kv * k_blocks, [&](int64_t task) {
    const int64_t kb = task % k_blocks;
    const int64_t hk = (task / k_blocks) % s.heads_kv;
    const int64_t b = task / (k_blocks * s.heads_kv);
    const int64_t k0 = kb * kBlockK;
    const int64_t cols = std::min(kBlockK, s.seq_k - k0);
    std::vector<float> kt(cols * s.head_dim), vt(cols * s.head_dim_v),
        dkt(cols * s.head_dim, 0.0f), dvt(cols * s.head_dim_v, 0.0f), dk_part(cols * s.head_dim),
        dv_part(cols * s.head_dim_v);
    const char* kb_ptr = static_cast<const char*>(k) + b * kv_batch_stride * s.head_dim * eb;
    const char* vb_ptr = static_cast<const char*>(v) + b * kv_batch_stride * s.head_dim_v * eb;
    load_rows(type, kb_ptr, s.heads_kv, s.head_dim, hk, k0, cols, kt.data());
    load_rows(type, vb_ptr, s.heads_kv, s.head_dim_v, hk, k0, cols, vt.data());
    // Causal: query i sees key k0 only if i >= k0 - (seq_k - seq_q); earlier q blocks are skipped.
    int64_t first_q = 0;
    if (opts.causal) first_q = std::clamp<int64_t>(k0 - (s.seq_k - s.seq_q), 0, s.seq_q);
    QBlock blk;
    for (int64_t h = hk * group; h < (hk + 1) * group; ++h) {
      for (int64_t i0 = (first_q / kBlockQ) * kBlockQ; i0 < s.seq_q; i0 += kBlockQ) {
        blk.load(type, s, opts.causal, q, o, d_o, lse, dlse, b, h, i0);
        std::fill(dk_part.begin(), dk_part.end(), 0.0f);
        std::fill(dv_part.begin(), dv_part.end(), 0.0f);
        backward_dkdv_block(blk.q.data(), blk.d_o.data(), blk.delta.data(), blk.dlse_r.data(),
                            blk.lse2.data(), blk.rows, kt.data(), vt.data(), cols, s.head_dim,
                            s.head_dim_v, scale, scale_log2, blk.kend.data(), k0, dk_part.data(),
                            dv_part.data());
        for (size_t x = 0; x < dk_part.size(); ++x) dkt[x] += dk_part[x];
        for (size_t x = 0; x < dv_part.size(); ++x) dvt[x] += dv_part[x];
      }
    }
    char* dkb = static_cast<char*>(dk) + b * kv_batch_stride * s.head_dim * eb;
    char* dvb = static_cast<char*>(dv) + b * kv_batch_stride * s.head_dim_v * eb;
    store_rows(type, dkt.data(), s.heads_kv, s.head_dim, hk, k0, cols, dkb);
    store_rows(type, dvt.data(), s.heads_kv, s.head_dim_v, hk, k0, cols, dvb);
  });
}

}  // namespace jax_fa4::cpu
