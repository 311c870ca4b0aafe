// CPU forward and backward: tiles are converted to float32, then float kernels do the math.
#include "cpu/attention_cpu.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "cpu/mask_cpu.h"
#include "cpu/parallel_for.h"
#include "cpu/tile_math.h"

// AVX2/FMA versions of the hot loops, picked at load time, where the toolchain supports ifuncs.
// flatten: the tile helpers must be inlined into each clone, or they run at the baseline ISA.
#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__) && !defined(__clang__)
#define JAX_FA4_HOT __attribute__((target_clones("arch=x86-64-v3", "default"), flatten))
#else
#define JAX_FA4_HOT
#endif

namespace jax_fa4::cpu {
namespace {

constexpr int64_t kBlockQ = 64;
// 64 keys: K^T [head_dim][64] of head dim 128 stays in L1 (128 keys ran 1.5x slower there).
constexpr int64_t kBlockK = 64;
constexpr int64_t kMaxHeadDim = 256;  // the Python layer and the handlers reject larger
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

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

// Copies a [n][dim] tile into dst [dim][ld] (transposed), zero-filling columns n..ld.
void transpose_padded(const float* src, int64_t n, int64_t dim, int64_t ld, float* dst) {
  std::fill(dst, dst + dim * ld, 0.0f);
  transpose(src, dim, n, dim, dst, ld);
}

static_assert(kBlockK == kVisStride, "a tile's visibility row spans one key block");
static_assert(kBlockQ <= kVisStride, "kKeyRows products index visibility rows by query");

// The score modifier, the one place where raw dot products q.k become the softmax's logits, in
// log2 units: log2(e) * s' with s = scale * q.k and s' = s, or softcap * tanh(s / softcap)
// (tanh_approx, tile_math.h: vectorised, about two ulps).
struct ScoreMod {
  float scale;       // softmax_scale
  float scale_log2;  // scale * log2(e)
  float cap_in;      // scale / softcap
  float cap_log2;    // softcap * log2(e)
  bool capped;

  explicit ScoreMod(const AttentionOptions& o)
      : scale(o.softmax_scale),
        scale_log2(o.softmax_scale * kLog2e),
        cap_in(o.softcap > 0.0f ? o.softmax_scale / o.softcap : 0.0f),
        cap_log2(o.softcap * kLog2e),
        capped(o.softcap > 0.0f) {}

  // Raw scores x[0..n) -> logits (log2 units), in place.
  void logits(float* x, int64_t n) const {
    if (!capped) {
      for (int64_t j = 0; j < n; ++j) x[j] *= scale_log2;
    } else {
      for (int64_t j = 0; j < n; ++j) x[j] = cap_log2 * tanh_approx(x[j] * cap_in);
    }
  }
};

// One K/V block for `rows` query rows: the online-softmax update of (m, l, acc).
// kt is K^T [d][kBlockK] (zero past cols), v is V [cols][dv]; s is scratch [rows][kBlockK].
// m is the running max in log2 units. vis: the tile's visibility (mask_cpu.h), null when every
// row sees every key of the block.
// A key a row cannot see never enters that row's sums, not even as 0 * v: its logit is replaced
// by -inf (selected, not scaled) and P V skips it, so a NaN or Inf in that key's K or V row
// cannot reach the row.
JAX_FA4_HOT void forward_block(const float* q, int64_t rows, const float* kt, const float* v,
                               int64_t cols, int64_t d, int64_t dv, const ScoreMod& mod,
                               const uint8_t* vis, float* s, float* m, float* l, float* acc,
                               float* part) {
  const int64_t width = (cols + 15) / 16 * 16;
  matmul(q, d, kt, kBlockK, s, kBlockK, rows, d, width, /*accumulate=*/false);
  for (int64_t i = 0; i < rows; ++i) {
    float* si = s + i * kBlockK;
    if (vis) {
      const uint8_t* vr = vis + i * kVisStride;
      bool any = false;
      for (int64_t j = 0; j < cols; ++j) any |= vr[j] != 0;
      if (!any) {  // this row sees no key of the block: its state stays as it is
        std::fill(si, si + cols, 0.0f);
        continue;
      }
      mod.logits(si, cols);
      for (int64_t j = 0; j < cols; ++j) si[j] = vr[j] ? si[j] : kNegInf;
    } else {
      mod.logits(si, cols);
    }
    // A NaN logit of a visible key (a NaN in this row's q, or in that key's k) reaches the row
    // through the exponentials below, as the arithmetic says it should.
    const float mx = row_max(si, cols, m[i]);
    for (int64_t j = 0; j < cols; ++j) si[j] = exp2_approx(si[j] - mx);  // exp2(-inf) = 0
    const float alpha = exp2_approx(m[i] - mx);  // m[i] = -inf at the start: alpha = 0
    float* acc_i = acc + i * dv;
    if (alpha != 1.0f) {
      for (int64_t c = 0; c < dv; ++c) acc_i[c] *= alpha;
    }
    l[i] = l[i] * alpha + row_sum(si, cols);
    m[i] = mx;
  }
  // This block's P V lands in a zeroed partial first: blocked summation keeps float32 error
  // growing with the number of blocks, not of keys.
  if (vis)
    matmul<Keep::kQueryRows>(s, kBlockK, v, dv, part, dv, rows, cols, dv, false, vis);
  else
    matmul(s, kBlockK, v, dv, part, dv, rows, cols, dv, /*accumulate=*/false);
  for (int64_t x = 0; x < rows * dv; ++x) acc[x] += part[x];
}

// P and dS of `rows` query rows against one K/V block (the backward's shared first half):
// p = exp2(logit - lse2), ds = p * ((dO V^T - delta) + dlse) * ds'/d(q.k), with delta = rowsum(dO
// * O) computed by the same matmul arithmetic as dO V^T, so that dP - delta is exactly 0 where
// V's row equals O's (one visible key). ds'/d(q.k) is scale, times (1 - tanh^2) under a soft cap.
// The lse already includes any sink, so this holds with sinks too.
// kt is K^T [d][kBlockK], vt is V^T [dv][kBlockK]; p and ds are [rows][kBlockK]. Invisible
// entries (vis; null: all visible) are set to 0 by selection, never computed as 0 * (...), and the
// products that follow skip them.
JAX_FA4_HOT void backward_p_ds(const float* q, const float* d_o, const float* o,
                               const float* dlse, const float* lse2, int64_t rows,
                               const float* kt, const float* vt, int64_t cols, int64_t d,
                               int64_t dv, const ScoreMod& mod, const uint8_t* vis, float* p,
                               float* ds) {
  const int64_t width = (cols + 15) / 16 * 16;
  matmul(q, d, kt, kBlockK, p, kBlockK, rows, d, width, /*accumulate=*/false);
  matmul(d_o, dv, vt, kBlockK, ds, kBlockK, rows, dv, width, /*accumulate=*/false);
  float o_col[kMaxHeadDim * 16] = {};
  float delta16[16];
  for (int64_t i = 0; i < rows; ++i) {
    float* pi = p + i * kBlockK;
    float* dsi = ds + i * kBlockK;
    // A row whose lse is -inf takes no part (drop_dead_rows has cleared its visibility).
    if (lse2[i] == kNegInf) {
      std::fill(pi, pi + kBlockK, 0.0f);
      std::fill(dsi, dsi + kBlockK, 0.0f);
      continue;
    }
    // O_i as column 0 of a 16-wide operand: delta_i then takes the very instructions dP takes.
    for (int64_t c = 0; c < dv; ++c) o_col[c * 16] = o[i * dv + c];
    matmul(d_o + i * dv, dv, o_col, 16, delta16, 16, 1, dv, 16, /*accumulate=*/false);
    const float delta_i = delta16[0];
    // (dP - delta) first: it cancels exactly where it should, then the lse cotangent enters.
    if (!mod.capped) {
      for (int64_t j = 0; j < cols; ++j) {
        pi[j] = exp2_approx(pi[j] * mod.scale_log2 - lse2[i]);
        dsi[j] = pi[j] * ((dsi[j] - delta_i) + dlse[i]) * mod.scale;
      }
    } else {
      for (int64_t j = 0; j < cols; ++j) {
        const float th = tanh_approx(pi[j] * mod.cap_in);
        pi[j] = exp2_approx(th * mod.cap_log2 - lse2[i]);
        dsi[j] = pi[j] * ((dsi[j] - delta_i) + dlse[i]) * (mod.scale * (1.0f - th * th));
      }
    }
    if (vis) {
      const uint8_t* vr = vis + i * kVisStride;
      for (int64_t j = 0; j < cols; ++j) {
        pi[j] = vr[j] ? pi[j] : 0.0f;
        dsi[j] = vr[j] ? dsi[j] : 0.0f;
      }
    }
    std::fill(pi + cols, pi + kBlockK, 0.0f);
    std::fill(dsi + cols, dsi + kBlockK, 0.0f);
  }
}

// dQ of `rows` query rows from one K/V block: dq = dS K (k is K [cols][d]).
JAX_FA4_HOT void backward_dq_block(const float* q, const float* d_o, const float* o,
                                   const float* dlse, const float* lse2, int64_t rows,
                                   const float* k, const float* kt, const float* vt, int64_t cols,
                                   int64_t d, int64_t dv, const ScoreMod& mod, const uint8_t* vis,
                                   float* p, float* ds, float* dq) {
  backward_p_ds(q, d_o, o, dlse, lse2, rows, kt, vt, cols, d, dv, mod, vis, p, ds);
  if (vis)
    matmul<Keep::kQueryRows>(ds, kBlockK, k, d, dq, d, rows, cols, d, false, vis);
  else
    matmul(ds, kBlockK, k, d, dq, d, rows, cols, d, /*accumulate=*/false);
}

// dK, dV of one K/V block from `rows` query rows: dv = P^T dO, dk = dS^T Q (pt: [kBlockK][rows]).
JAX_FA4_HOT void backward_dkdv_block(const float* q, const float* d_o, const float* o,
                                     const float* dlse, const float* lse2, int64_t rows,
                                     const float* kt, const float* vt, int64_t cols, int64_t d,
                                     int64_t dv, const ScoreMod& mod, const uint8_t* vis, float* p,
                                     float* ds, float* pt, float* dk, float* dvv) {
  backward_p_ds(q, d_o, o, dlse, lse2, rows, kt, vt, cols, d, dv, mod, vis, p, ds);
  // A key skips the query rows that cannot see it: their dO and Q rows never enter its sums.
  transpose(p, kBlockK, rows, cols, pt, kBlockQ);
  if (vis)
    matmul<Keep::kKeyRows>(pt, kBlockQ, d_o, dv, dvv, dv, cols, rows, dv, false, vis);
  else
    matmul(pt, kBlockQ, d_o, dv, dvv, dv, cols, rows, dv, /*accumulate=*/false);
  transpose(ds, kBlockK, rows, cols, pt, kBlockQ);
  if (vis)
    matmul<Keep::kKeyRows>(pt, kBlockQ, q, d, dk, d, cols, rows, d, false, vis);
  else
    matmul(pt, kBlockQ, q, d, dk, d, cols, rows, d, /*accumulate=*/false);
}

int64_t num_blocks(int64_t n, int64_t block) { return (n + block - 1) / block; }

}  // namespace

void attention_forward(ElementType type, const AttentionShape& s, const AttentionOptions& opts,
                       const void* q, const void* k, const void* v, void* o, float* lse) {
  const int64_t eb = element_bytes(type);
  const int64_t q_blocks = num_blocks(s.seq_q, kBlockQ);
  const int64_t group = s.heads_q / s.heads_kv;
  const ScoreMod mod(opts);
  parallel_for(s.batch * s.heads_q * q_blocks, [&](int64_t task) {
    const int64_t qb = task % q_blocks;
    const int64_t h = (task / q_blocks) % s.heads_q;
    const int64_t b = task / (q_blocks * s.heads_q);
    const int64_t hk = h / group;
    const int64_t i0 = qb * kBlockQ;
    const int64_t rows = std::min(kBlockQ, s.seq_q - i0);
    const EntryMask mask(s, opts, b);
    std::vector<float> qt(rows * s.head_dim), kt(kBlockK * s.head_dim),
        ktt(s.head_dim * kBlockK), vt(kBlockK * s.head_dim_v), st(rows * kBlockK),
        acc(rows * s.head_dim_v, 0.0f), part(rows * s.head_dim_v), m(rows, kNegInf),
        l(rows, 0.0f);
    uint8_t vis[kBlockQ * kVisStride];
    const char* qb_ptr = static_cast<const char*>(q) + b * s.seq_q * s.heads_q * s.head_dim * eb;
    const char* kb_ptr = static_cast<const char*>(k) + b * s.seq_k * s.heads_kv * s.head_dim * eb;
    const char* vb_ptr =
        static_cast<const char*>(v) + b * s.seq_k * s.heads_kv * s.head_dim_v * eb;
    // Only the key blocks of the rows' band are visited, and of those only the tiles with a
    // visible pair are loaded and multiplied.
    int64_t key_lo, key_hi;
    mask.key_span(i0, i0 + rows, &key_lo, &key_hi);
    if (key_lo < key_hi) load_rows(type, qb_ptr, s.heads_q, s.head_dim, h, i0, rows, qt.data());
    for (int64_t k0 = key_lo / kBlockK * kBlockK; k0 < key_hi; k0 += kBlockK) {
      const int64_t cols = std::min(kBlockK, s.seq_k - k0);
      const TileVis tv = mask.tile(i0, rows, k0, cols, vis);
      if (tv == TileVis::kNone) continue;
      load_rows(type, kb_ptr, s.heads_kv, s.head_dim, hk, k0, cols, kt.data());
      load_rows(type, vb_ptr, s.heads_kv, s.head_dim_v, hk, k0, cols, vt.data());
      transpose_padded(kt.data(), cols, s.head_dim, kBlockK, ktt.data());
      forward_block(qt.data(), rows, ktt.data(), vt.data(), cols, s.head_dim, s.head_dim_v, mod,
                    tv == TileVis::kPartial ? vis : nullptr, st.data(), m.data(), l.data(),
                    acc.data(), part.data());
    }
    // The sink is one more logit in the denominator only: lse = log(exp(sink) + sum exp(s')).
    const float sink = opts.sinks ? opts.sinks[b * s.heads_q + h] : kNegInf;
    for (int64_t r = 0; r < rows; ++r) {
      float* acc_r = acc.data() + r * s.head_dim_v;
      const int64_t lse_index = (b * s.heads_q + h) * s.seq_q + i0 + r;
      if (i0 + r >= mask.q_len()) {  // padding: o 0, lse -inf, no sink
        std::fill(acc_r, acc_r + s.head_dim_v, 0.0f);
        lse[lse_index] = kNegInf;
      } else if (l[r] == 0.0f) {  // no visible key: o 0, lse the sink (-inf without sinks)
        std::fill(acc_r, acc_r + s.head_dim_v, 0.0f);
        lse[lse_index] = sink;
      } else if (!opts.sinks) {
        const float inv = 1.0f / l[r];
        for (int64_t c = 0; c < s.head_dim_v; ++c) acc_r[c] *= inv;
        lse[lse_index] = m[r] * kLn2 + std::log(l[r]);
      } else {
        // The denominator l * 2^m + 2^sink2, taken relative to the larger exponent.
        const float sink2 = sink * kLog2e;
        const float top = std::max(m[r], sink2);
        const float keys = l[r] * std::exp2(m[r] - top);
        const float total = keys + std::exp2(sink2 - top);
        const float inv = std::exp2(m[r] - top) / total;
        for (int64_t c = 0; c < s.head_dim_v; ++c) acc_r[c] *= inv;
        lse[lse_index] = (top + std::log2(total)) * kLn2;
      }
    }
    char* ob_ptr = static_cast<char*>(o) + b * s.seq_q * s.heads_q * s.head_dim_v * eb;
    store_rows(type, acc.data(), s.heads_q, s.head_dim_v, h, i0, rows, ob_ptr);
  });
}

namespace {

// Per-query-block inputs of the backward: Q, dO, O, dlse, lse in log2 units.
struct QBlock {
  std::vector<float> q, d_o, o, dlse_r, lse2;
  int64_t rows = 0;

  void load(ElementType type, const AttentionShape& s, const void* qp, const void* op,
            const void* dop, const float* lse, const float* dlse, int64_t b, int64_t h,
            int64_t i0) {
    const int64_t eb = element_bytes(type);
    rows = std::min(kBlockQ, s.seq_q - i0);
    q.resize(rows * s.head_dim);
    d_o.resize(rows * s.head_dim_v);
    o.resize(rows * s.head_dim_v);
    dlse_r.resize(rows);
    lse2.resize(rows);
    const int64_t qoff = b * s.seq_q * s.heads_q * s.head_dim * eb;
    const int64_t ooff = b * s.seq_q * s.heads_q * s.head_dim_v * eb;
    load_rows(type, static_cast<const char*>(qp) + qoff, s.heads_q, s.head_dim, h, i0, rows,
              q.data());
    load_rows(type, static_cast<const char*>(dop) + ooff, s.heads_q, s.head_dim_v, h, i0, rows,
              d_o.data());
    load_rows(type, static_cast<const char*>(op) + ooff, s.heads_q, s.head_dim_v, h, i0, rows,
              o.data());
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t row = (b * s.heads_q + h) * s.seq_q + i0 + r;
      dlse_r[r] = dlse[row];
      lse2[r] = lse[row] * kLog2e;
    }
  }
};

// Rows whose lse is -inf saw no key in the forward (padding rows, rows outside every band, or
// all logits -inf): they take no part in the backward, so their P and dS, which are then no
// probabilities, never enter a product. Returns the tile's visibility with those rows cleared.
TileVis drop_dead_rows(const float* lse2, int64_t rows, int64_t cols, TileVis tv, uint8_t* vis) {
  if (tv == TileVis::kNone) return tv;
  bool any = false;
  for (int64_t r = 0; r < rows; ++r) any |= lse2[r] == kNegInf;
  if (!any) return tv;
  bool live = false;
  for (int64_t r = 0; r < rows; ++r) {
    uint8_t* vr = vis + r * kVisStride;
    if (lse2[r] == kNegInf) {
      std::fill(vr, vr + cols, uint8_t{0});
    } else {
      if (tv == TileVis::kAll) std::fill(vr, vr + cols, uint8_t{1});
      for (int64_t c = 0; c < cols; ++c) live |= vr[c] != 0;
    }
  }
  return live ? TileVis::kPartial : TileVis::kNone;
}

}  // namespace

void attention_backward(ElementType type, const AttentionShape& s, const AttentionOptions& opts,
                        const void* q, const void* k, const void* v, const void* o,
                        const float* lse, const void* d_o, const float* dlse, void* dq, void* dk,
                        void* dv) {
  const int64_t eb = element_bytes(type);
  const int64_t q_blocks = num_blocks(s.seq_q, kBlockQ);
  const int64_t k_blocks = num_blocks(s.seq_k, kBlockK);
  const int64_t group = s.heads_q / s.heads_kv;
  const ScoreMod mod(opts);
  const int64_t kv_batch_stride = s.seq_k * s.heads_kv;

  // Pass 1: dQ, one task per (batch, q head, q block); recomputes P, no atomics, deterministic.
  parallel_for(s.batch * s.heads_q * q_blocks, [&](int64_t task) {
    const int64_t qb = task % q_blocks;
    const int64_t h = (task / q_blocks) % s.heads_q;
    const int64_t b = task / (q_blocks * s.heads_q);
    const int64_t hk = h / group;
    const int64_t i0 = qb * kBlockQ;
    const EntryMask mask(s, opts, b);
    const int64_t rows = std::min(kBlockQ, s.seq_q - i0);
    std::vector<float> dqt(rows * s.head_dim, 0.0f);
    int64_t key_lo, key_hi;
    mask.key_span(i0, i0 + rows, &key_lo, &key_hi);
    if (key_lo < key_hi) {
      QBlock blk;
      blk.load(type, s, q, o, d_o, lse, dlse, b, h, i0);
      std::vector<float> kt(kBlockK * s.head_dim), vt(kBlockK * s.head_dim_v),
          ktt(s.head_dim * kBlockK), vtt(s.head_dim_v * kBlockK), p(kBlockQ * kBlockK),
          ds(kBlockQ * kBlockK), part(rows * s.head_dim);
      uint8_t vis[kBlockQ * kVisStride];
      const char* kb_ptr = static_cast<const char*>(k) + b * kv_batch_stride * s.head_dim * eb;
      const char* vb_ptr = static_cast<const char*>(v) + b * kv_batch_stride * s.head_dim_v * eb;
      for (int64_t k0 = key_lo / kBlockK * kBlockK; k0 < key_hi; k0 += kBlockK) {
        const int64_t cols = std::min(kBlockK, s.seq_k - k0);
        TileVis tv = mask.tile(i0, rows, k0, cols, vis);
        tv = drop_dead_rows(blk.lse2.data(), rows, cols, tv, vis);
        if (tv == TileVis::kNone) continue;
        load_rows(type, kb_ptr, s.heads_kv, s.head_dim, hk, k0, cols, kt.data());
        load_rows(type, vb_ptr, s.heads_kv, s.head_dim_v, hk, k0, cols, vt.data());
        transpose_padded(kt.data(), cols, s.head_dim, kBlockK, ktt.data());
        transpose_padded(vt.data(), cols, s.head_dim_v, kBlockK, vtt.data());
        // Each block's sum lands in a partial first: blocked summation keeps float32 error
        // growing with the number of blocks, not of keys.
        backward_dq_block(blk.q.data(), blk.d_o.data(), blk.o.data(), blk.dlse_r.data(),
                          blk.lse2.data(), rows, kt.data(), ktt.data(), vtt.data(), cols,
                          s.head_dim, s.head_dim_v, mod, tv == TileVis::kPartial ? vis : nullptr,
                          p.data(), ds.data(), part.data());
        for (size_t x = 0; x < part.size(); ++x) dqt[x] += part[x];
      }
    }
    char* dqb = static_cast<char*>(dq) + b * s.seq_q * s.heads_q * s.head_dim * eb;
    store_rows(type, dqt.data(), s.heads_q, s.head_dim, h, i0, rows, dqb);
  });

  // Pass 2: dK and dV, one task per (batch, kv head, k block), summed over the q heads of its group.
  parallel_for(s.batch * s.heads_kv * k_blocks, [&](int64_t task) {
    const int64_t kb = task % k_blocks;
    const int64_t hk = (task / k_blocks) % s.heads_kv;
    const int64_t b = task / (k_blocks * s.heads_kv);
    const int64_t k0 = kb * kBlockK;
    const int64_t cols = std::min(kBlockK, s.seq_k - k0);
    const EntryMask mask(s, opts, b);
    std::vector<float> dkt(cols * s.head_dim, 0.0f), dvt(cols * s.head_dim_v, 0.0f);
    // Only the query blocks whose band holds one of these keys are visited, and of those only
    // the tiles with a visible pair are loaded and multiplied.
    int64_t row_lo, row_hi;
    mask.row_span(k0, k0 + cols, &row_lo, &row_hi);
    if (row_lo < row_hi) {
      std::vector<float> kt(cols * s.head_dim), vt(cols * s.head_dim_v), dk_part(cols * s.head_dim),
          dv_part(cols * s.head_dim_v), ktt(s.head_dim * kBlockK), vtt(s.head_dim_v * kBlockK),
          p(kBlockQ * kBlockK), ds(kBlockQ * kBlockK), pt(kBlockK * kBlockQ);
      uint8_t vis[kBlockQ * kVisStride];
      const char* kb_ptr = static_cast<const char*>(k) + b * kv_batch_stride * s.head_dim * eb;
      const char* vb_ptr = static_cast<const char*>(v) + b * kv_batch_stride * s.head_dim_v * eb;
      load_rows(type, kb_ptr, s.heads_kv, s.head_dim, hk, k0, cols, kt.data());
      load_rows(type, vb_ptr, s.heads_kv, s.head_dim_v, hk, k0, cols, vt.data());
      transpose_padded(kt.data(), cols, s.head_dim, kBlockK, ktt.data());
      transpose_padded(vt.data(), cols, s.head_dim_v, kBlockK, vtt.data());
      QBlock blk;
      for (int64_t h = hk * group; h < (hk + 1) * group; ++h) {
        for (int64_t i0 = row_lo / kBlockQ * kBlockQ; i0 < row_hi; i0 += kBlockQ) {
          const int64_t rows = std::min(kBlockQ, s.seq_q - i0);
          TileVis tv = mask.tile(i0, rows, k0, cols, vis);
          if (tv == TileVis::kNone) continue;
          blk.load(type, s, q, o, d_o, lse, dlse, b, h, i0);
          tv = drop_dead_rows(blk.lse2.data(), rows, cols, tv, vis);
          if (tv == TileVis::kNone) continue;
          backward_dkdv_block(blk.q.data(), blk.d_o.data(), blk.o.data(), blk.dlse_r.data(),
                              blk.lse2.data(), rows, ktt.data(), vtt.data(), cols, s.head_dim,
                              s.head_dim_v, mod, tv == TileVis::kPartial ? vis : nullptr,
                              p.data(), ds.data(), pt.data(), dk_part.data(), dv_part.data());
          for (size_t x = 0; x < dk_part.size(); ++x) dkt[x] += dk_part[x];
          for (size_t x = 0; x < dv_part.size(); ++x) dvt[x] += dv_part[x];
        }
      }
    }
    char* dkb = static_cast<char*>(dk) + b * kv_batch_stride * s.head_dim * eb;
    char* dvb = static_cast<char*>(dv) + b * kv_batch_stride * s.head_dim_v * eb;
    store_rows(type, dkt.data(), s.heads_kv, s.head_dim, hk, k0, cols, dkb);
    store_rows(type, dvt.data(), s.heads_kv, s.head_dim_v, hk, k0, cols, dvb);
  });
}

}  // namespace jax_fa4::cpu
