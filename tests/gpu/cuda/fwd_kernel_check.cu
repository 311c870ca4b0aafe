// Standalone check of the Hopper forward, no JAX involved: random inputs, outputs poisoned with
// NaN before each launch, compared with a float64 CPU reference; then (--bench) kernel-only
// timings on the FlashAttention-3 grid. It runs the library's entry point ("library": the
// configuration the host heuristics pick) and any named configuration (cuda/hopper/fwd/config.cuh)
// through launch_fwd_config, the same types the library launches.
//   --configs "library,hd128 persistent"  what to run (default: the library and every named one)
//   --hd D            one head dim          --seqs 2048,4096   the timed lengths
//   --max-ctas N      a persistent configuration runs at most N CTAs (many tiles per CTA)
//   --section N       (head, batch) pairs per longest-first section instead of the model's choice
//   --quick           three small bf16 shapes and three variant ones only (for compute-sanitizer)
//   --no-variants     skip the attention-variant cases   --variants-only   run only those
//   --bench-shapes    only the benchmark's variant cells: bf16, batch 1, 16 heads, hd128, seq 16384,
//                     causal with windows (4096, 0) and (1024, 0), soft cap 30, sinks, and 8
//                     documents of 2048 (sorted segment ids); rows checked at a stride of 61
//   --no-decode       skip the decode cases   --decode-only   run only those (the library's split-KV
//                     path: few query rows per kv head, cache lengths, NaN past them in K and V)
//   --decode-bench    kernel-only bandwidth of decode shapes, the library beside the hd128 kernel
//   --decode-cells "b,sq,sk,hq,hkv,d;..."   the shapes --decode-bench times instead of its own
//   --decode-plans "splits:ctas_per_sm,..."   --decode-bench also times each cell's decode cut with
//                     these split counts and residencies (forced; a line per plan)
//   --bench-window L,R, --bench-softcap C   the band and soft cap the --bench rows run
//   --bench-docs N    the --bench rows packed with N equal documents per row (sorted segment ids)
//   --bench-sinks     the --bench rows with one sink logit per head
//   --timeout-s N     a launch still running after N seconds (default 120) prints HANG with the
//                     case and exits with code 4 (stdout is line-buffered, so the last line names it)
// The variant cases (window bands, negative bands, query / key lengths, segment ids sorted and
// unsorted, soft cap, sinks, and combinations of them) run on every selected configuration; the
// float64 reference implements the variant semantics of common/problem.h, and NaN is planted in
// the padding queries and keys (q rows >= q_len, k rows >= kv_len), which no row may see.
// Build: tests/gpu/validate.sh (harness stage).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "hopper/decode/launch.h"
#include "hopper/decode/plan.h"
#include "hopper/fwd/config.cuh"
#include "hopper/fwd/launch.h"
#include "hopper/fwd/tile_order.h"
#include "check_util.h"

using fa4::hopper::Dtype;
using fa4::hopper::FwdProblem;
using fa4::hopper::FwdScheduleParams;
using fa4::hopper::MaskKind;
constexpr int kUnb = fa4::hopper::kWindowUnbounded;

// What the harness can run: the library's entry point, and each named configuration at its head dim.
struct Runner {
  std::string name;
  int head_dim;  // 0: every head dim (the library)
  std::string (*launch)(const FwdProblem&, cudaStream_t, const FwdScheduleParams&);
};
template <template <MaskKind> class Config>
static std::string run_config(const FwdProblem& p, cudaStream_t s, const FwdScheduleParams& sp) {
  return fa4::hopper::launch_fwd_config<Config>(p, s, sp);
}
static std::string run_library(const FwdProblem& p, cudaStream_t s, const FwdScheduleParams&) {
  return fa4::hopper::launch_fwd(p, s);
}
static const Runner kRunners[] = {
    {"library", 0, run_library},
    {fa4::hopper::FwdHd64<MaskKind::kDense>::name(), 64, run_config<fa4::hopper::FwdHd64>},
    {fa4::hopper::FwdHd64Persistent<MaskKind::kDense>::name(), 64, run_config<fa4::hopper::FwdHd64Persistent>},
    {fa4::hopper::FwdHd128<MaskKind::kDense>::name(), 128, run_config<fa4::hopper::FwdHd128>},
    {fa4::hopper::FwdHd128Persistent<MaskKind::kDense>::name(), 128, run_config<fa4::hopper::FwdHd128Persistent>},
    {fa4::hopper::FwdHd256<MaskKind::kDense>::name(), 256, run_config<fa4::hopper::FwdHd256>},
};
static FwdScheduleParams g_params;  // --max-ctas, --section
static double g_timeout_s = 120;     // --timeout-s

// Waits for the launch on the default stream; one still running after g_timeout_s is reported as
// a hang (the case named) and the process exits with code 4 (the driver tears the context down).
static void wait_or_report_hang(const std::string& what) {
  const auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    const cudaError_t e = cudaStreamQuery(0);
    if (e == cudaSuccess) return;
    if (e != cudaErrorNotReady) CHECK_CUDA(e);
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > g_timeout_s) {
      std::printf("HANG %s: still running after %.0f s\n", what.c_str(), g_timeout_s);
      std::fflush(stdout);
      std::_Exit(4);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

static const Runner* find_runner(const std::string& name) {
  for (const Runner& r : kRunners)
    if (r.name == name) return &r;
  return nullptr;
}
static bool runs_at(const Runner& r, int d) { return r.head_dim == 0 || r.head_dim == d; }

// An attention variant (common/problem.h): what a case adds to dense / causal attention.
struct Variant {
  int left = kUnb, right = kUnb;  // the window band around the diagonal (may be negative)
  int lengths = 0;                // 1: per-batch q and kv lengths (0, full, partial), 2: kv only
  int segments = 0;               // 1: sorted ids (packed documents), 2: unsorted ids in {0, 1, 2},
                                  // 3: documents of 2048 (the benchmark's packing), 4: two
                                  // interleaved documents (whole 64-row chunks of ids 1 and 2 in
                                  // random order, a quarter of the chunks split between them)
  float softcap = 0.f;
  bool sinks = false;
  bool any() const {
    return left < kUnb || right < kUnb || lengths || segments || softcap > 0.f || sinks;
  }
};

struct Case {
  int b, sq, sk, hq, hkv, d;
  bool bf16, causal;
  // growth != 0: scores that grow along the kernel's key order (it runs the key blocks from the
  // last to the first), to make the running max move often:
  // Q entries ~ N(1, 1) and key j gets growth * (sk - 1 - j) / (sk * sqrt(d)) added to every entry,
  // so a row's scores rise by about `growth` (natural-log units) from the last key to the first.
  // Negative: the maximum sits in the first block the kernel computes.
  float growth = 0.f;
  Variant var = {};
  int row_stride = 0;  // checked rows: every row_stride-th and the last 130 (0: by size)
  // NaN in V past the cache length too: the decode path zeroes the V rows no row of its tile sees
  // (the one-tile kernels multiply them by P = 0, so they cannot take this).
  bool nan_v_padding = false;
};

static std::string describe(const Case& c) {
  char buf[200];
  std::snprintf(buf, sizeof buf, "b=%d sq=%d sk=%d hq=%d hkv=%d d=%d %s %s", c.b, c.sq, c.sk, c.hq,
                c.hkv, c.d, c.bf16 ? "bf16" : "fp16", c.causal ? "causal" : "full");
  std::string out = buf;
  if (c.growth != 0.f) {
    std::snprintf(buf, sizeof buf, " growth=%g", c.growth);
    out += buf;
  }
  const Variant& v = c.var;
  if (v.left < kUnb || v.right < kUnb) {
    auto side = [](int x) { return x >= kUnb ? std::string("inf") : std::to_string(x); };
    out += " window=(" + side(v.left) + "," + side(v.right) + ")";
  }
  if (v.lengths) out += v.lengths == 1 ? " lengths" : " kv-lengths";
  if (v.segments) {
    out += v.segments == 1   ? " segments-sorted"
           : v.segments == 2 ? " segments-unsorted"
           : v.segments == 3 ? " documents-of-2048"
                             : " segments-interleaved";
  }
  if (v.softcap > 0.f) {
    std::snprintf(buf, sizeof buf, " softcap=%g", v.softcap);
    out += buf;
  }
  if (v.sinks) out += " sinks";
  return out;
}

// The variant's host arrays for one case (empty when absent).
struct VariantData {
  std::vector<int32_t> q_len, kv_len, q_ids, kv_ids, q_ranges, kv_ranges;
  std::vector<float> sinks;
};

static VariantData make_variant(const Case& c, std::mt19937_64& rng) {
  VariantData vd;
  const Variant& v = c.var;
  if (v.lengths) {
    for (int b = 0; b < c.b; ++b) {
      // Batch 0: a short partial length, 1: full, 2: empty (0), then random; lengths past the
      // sequence are clamped by the kernels (-5 and seq + 7 check it).
      const int pick = b % 4;
      auto len = [&](int seq) {
        if (pick == 0) return std::max(1, seq / 3 + 1);
        if (pick == 1 && b >= 4) return 1;
        if (pick == 1) return seq + 7;
        if (pick == 2) return b == 2 ? 0 : -5;
        return int(rng() % uint64_t(seq + 1));
      };
      vd.q_len.push_back(v.lengths == 1 ? len(c.sq) : c.sq);
      vd.kv_len.push_back(len(c.sk));
    }
  }
  if (v.segments) {
    auto ids = [&](int seq) {
      std::vector<int32_t> out(size_t(c.b) * seq);
      for (int b = 0; b < c.b; ++b) {
        if (v.segments == 3) {
          for (int i = 0; i < seq; ++i) out[size_t(b) * seq + i] = 1 + i / 2048;
        } else if (v.segments == 1) {
          // Documents of random lengths (1 .. seq / 3), ids rising from b.
          int id = b, left = 0;
          for (int i = 0; i < seq; ++i) {
            if (left == 0) {
              left = 1 + int(rng() % uint64_t(std::max(1, seq / 3)));
              ++id;
            }
            out[size_t(b) * seq + i] = id;
            --left;
          }
        } else if (v.segments == 4) {
          // Interleaved: no uniform run (TileMask::uniform_key_run), every block takes the element mask.
          const std::vector<int32_t> row = interleaved_document_ids(seq, rng);
          std::copy(row.begin(), row.end(), out.begin() + size_t(b) * seq);
        } else {
          for (int i = 0; i < seq; ++i) out[size_t(b) * seq + i] = int(rng() % 3);
        }
      }
      return out;
    };
    vd.q_ids = ids(c.sq);
    if (c.sq == c.sk && v.segments != 2) {
      vd.kv_ids = vd.q_ids;  // the public API's one array
    } else {
      vd.kv_ids = ids(c.sk);
    }
    vd.q_ranges = segment_chunk_ranges(vd.q_ids, c.b, c.sq);
    vd.kv_ranges = segment_chunk_ranges(vd.kv_ids, c.b, c.sk);
  }
  if (v.sinks) {
    std::normal_distribution<float> nd(0.f, 2.f);
    for (int i = 0; i < c.b * c.hq; ++i) vd.sinks.push_back(nd(rng));
  }
  return vd;
}

// Runs every selected runner of the case's head dim on one case; returns the number of failures. Checks every row
// when small, else a strided subset plus the last rows; the float64 reference is computed once.
static int run_case(const Case& c, uint64_t seed, double* worst_ratio, const std::vector<const Runner*>& runners,
                    int* runs) {
  const size_t nq = size_t(c.b) * c.sq * c.hq * c.d, nk = size_t(c.b) * c.sk * c.hkv * c.d;
  std::vector<uint16_t> hq(nq), hk(nk), hv(nk);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  const float q_mean = c.growth != 0.f ? 1.f : 0.f;
  for (auto& x : hq) x = to_bits(nd(rng) + q_mean, c.bf16);
  for (size_t i = 0; i < nk; ++i) {
    const int j = int((i / (size_t(c.hkv) * c.d)) % std::max(c.sk, 1));  // key index (BSHD)
    const float ramp = c.growth * float(c.sk - 1 - j) / (float(std::max(c.sk, 1)) * std::sqrt(float(c.d)));
    hk[i] = to_bits(nd(rng) + ramp, c.bf16);
  }
  for (auto& x : hv) x = to_bits(nd(rng), c.bf16);
  const VariantData vd = make_variant(c, rng);
  const Variant& var = c.var;
  auto q_len_of = [&](int b) { return vd.q_len.empty() ? c.sq : std::min(std::max(vd.q_len[b], 0), c.sq); };
  auto kv_len_of = [&](int b) { return vd.kv_len.empty() ? c.sk : std::min(std::max(vd.kv_len[b], 0), c.sk); };
  // NaN in the padding queries and keys: no row may see them (a masked score is selected to -inf,
  // and padding rows are written as 0). V stays finite: P = 0 times a non-finite V of a key in a
  // loaded partial block still reaches the MMA's sum (docs/hopper-kernels.md, the variants).
  const uint16_t nan_bits = 0xFFFF;
  for (int b = 0; b < c.b; ++b) {
    for (int i = q_len_of(b); i < c.sq; ++i)
      for (int t = 0; t < c.hq * c.d; ++t) hq[(size_t(b) * c.sq + i) * c.hq * c.d + t] = nan_bits;
    for (int j = kv_len_of(b); j < c.sk; ++j)
      for (int t = 0; t < c.hkv * c.d; ++t) {
        hk[(size_t(b) * c.sk + j) * c.hkv * c.d + t] = nan_bits;
        if (c.nan_v_padding) hv[(size_t(b) * c.sk + j) * c.hkv * c.d + t] = nan_bits;
      }
  }
  const size_t nlse = size_t(c.b) * c.hq * c.sq;
  const float scale = 1.f / std::sqrt(float(c.d));

  // Reference for the checked rows: o (row-major [row][d]) and lse per (b, h, checked row).
  const int stride = c.row_stride > 0 ? c.row_stride : (int64_t(c.sq) * c.sk > 2000000) ? 7 : 1;
  const int group = c.hq / c.hkv;
  std::vector<int> rows;
  for (int i = 0; i < c.sq; ++i)
    if (i % stride == 0 || i >= c.sq - 130) rows.push_back(i);
  const size_t nref = size_t(c.b) * c.hq * rows.size();
  std::vector<double> ref_o(nref * c.d), ref_lse(nref);
  const int right_eff = c.causal ? std::min(var.right, 0) : var.right;
#pragma omp parallel for collapse(2) schedule(dynamic)
  for (int bh = 0; bh < c.b * c.hq; ++bh) {
    for (size_t ri = 0; ri < rows.size(); ++ri) {
      const int bb = bh / c.hq, h = bh % c.hq, i = rows[ri], kvh = h / group;
      const size_t r = size_t(bh) * rows.size() + ri;
      const int q_len = q_len_of(bb), kv_len = kv_len_of(bb), off = kv_len - q_len;
      // The visible keys of row i (common/problem.h).
      std::vector<int> vis;
      if (i < q_len) {
        for (int j = 0; j < kv_len; ++j) {
          if (var.left < kUnb && j < int64_t(i) + off - var.left) continue;
          if (right_eff < kUnb && j > int64_t(i) + off + right_eff) continue;
          if (var.segments && vd.q_ids[size_t(bb) * c.sq + i] != vd.kv_ids[size_t(bb) * c.sk + j]) continue;
          vis.push_back(j);
        }
      }
      std::vector<double> sc(vis.size());
      double m = -INFINITY;
      for (size_t x = 0; x < vis.size(); ++x) {
        const int j = vis[x];
        double acc = 0;
        for (int t = 0; t < c.d; ++t)
          acc += double(from_bits(hq[((size_t(bb) * c.sq + i) * c.hq + h) * c.d + t], c.bf16)) *
                 double(from_bits(hk[((size_t(bb) * c.sk + j) * c.hkv + kvh) * c.d + t], c.bf16));
        acc *= scale;
        if (var.softcap > 0.f) acc = var.softcap * std::tanh(acc / var.softcap);
        sc[x] = acc;
        m = std::max(m, sc[x]);
      }
      const double sink = var.sinks && i < q_len ? double(vd.sinks[size_t(bb) * c.hq + h]) : -INFINITY;
      m = std::max(m, sink);
      double l = sink > -INFINITY ? std::exp(sink - m) : 0.0;
      for (auto& x : sc) l += (x = std::exp(x - m));
      for (int t = 0; t < c.d; ++t) {
        double acc = 0;
        for (size_t x = 0; x < vis.size(); ++x)
          acc += sc[x] * double(from_bits(hv[((size_t(bb) * c.sk + vis[x]) * c.hkv + kvh) * c.d + t], c.bf16));
        ref_o[r * c.d + t] = vis.empty() ? 0.0 : acc / l;
      }
      ref_lse[r] = m == -INFINITY ? -INFINITY : m + std::log(l);
    }
  }

  void *dq, *dk, *dv, *dout;
  float* dlse;
  CHECK_CUDA(cudaMalloc(&dq, std::max<size_t>(nq, 1) * 2));
  CHECK_CUDA(cudaMalloc(&dk, std::max<size_t>(nk, 1) * 2));
  CHECK_CUDA(cudaMalloc(&dv, std::max<size_t>(nk, 1) * 2));
  CHECK_CUDA(cudaMalloc(&dout, std::max<size_t>(nq, 1) * 2));
  CHECK_CUDA(cudaMalloc(&dlse, std::max<size_t>(nlse, 1) * 4));
  CHECK_CUDA(cudaMemcpy(dq, hq.data(), nq * 2, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(dk, hk.data(), nk * 2, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(dv, hv.data(), nk * 2, cudaMemcpyHostToDevice));
  std::vector<void*> device_arrays;
  auto upload = [&](const auto& host) -> const typename std::decay_t<decltype(host)>::value_type* {
    using V = typename std::decay_t<decltype(host)>::value_type;
    if (host.empty()) return nullptr;
    void* d = nullptr;
    CHECK_CUDA(cudaMalloc(&d, host.size() * sizeof(V)));
    CHECK_CUDA(cudaMemcpy(d, host.data(), host.size() * sizeof(V), cudaMemcpyHostToDevice));
    device_arrays.push_back(d);
    return static_cast<const V*>(d);
  };
  FwdProblem p{};
  static_cast<fa4::hopper::ProblemShape&>(p) = {c.b, c.sq, c.sk, c.hq, c.hkv, c.d,
                                                c.bf16 ? Dtype::kBf16 : Dtype::kF16, scale, c.causal};
  fa4::hopper::AttentionVariant& av = p.variant;
  av.window_left = var.left;
  av.window_right = var.right;
  av.softcap = var.softcap;
  av.q_lengths = var.lengths == 1 ? upload(vd.q_len) : nullptr;
  av.kv_lengths = upload(vd.kv_len);
  av.q_segment_ids = upload(vd.q_ids);
  av.kv_segment_ids = upload(vd.kv_ids);
  av.q_segment_ranges = upload(vd.q_ranges);
  av.kv_segment_ranges = upload(vd.kv_ranges);
  av.sinks = upload(vd.sinks);
  p.q = dq;
  p.k = dk;
  p.v = dv;
  p.o = dout;
  p.lse = dlse;
  // The forward's workspace (the decode path's partials), poisoned like the outputs.
  const size_t ws_bytes = fa4::hopper::fwd_workspace_bytes(c.b, c.sq, c.sk, c.hq, c.hkv, c.d);
  void* dws = nullptr;
  if (ws_bytes > 0) {
    CHECK_CUDA(cudaMalloc(&dws, ws_bytes));
    device_arrays.push_back(dws);
  }
  p.workspace = dws;
  p.workspace_bytes = ws_bytes;
  // The soft cap's tanh.approx has a relative error of about 2^-11: up to softcap * 2^-11 on a
  // score, which the LSE takes over and O feels relative to its size.
  const double cap_err = var.softcap > 0.f ? var.softcap * std::ldexp(1.0, -10) : 0.0;
  int failures = 0;
  for (const Runner* runner : runners) {
    if (!runs_at(*runner, c.d)) continue;
    ++*runs;
    if (c.row_stride > 0) std::printf("run  [%s] %s\n", runner->name.c_str(), describe(c).c_str());
    std::vector<uint16_t> ho(nq), ho2(nq);
    std::vector<float> hl(nlse), hl2(nlse);
    bool launch_ok = true;
    // Two launches on re-poisoned outputs must give identical bits (a moving result is a race).
    // Poison: 0xFFFF is NaN in bf16 and fp16, 0xFFFFFFFF is NaN in f32.
    for (int rep = 0; rep < 2 && launch_ok; ++rep) {
      CHECK_CUDA(cudaMemset(dout, 0xFF, std::max<size_t>(nq, 1) * 2));
      CHECK_CUDA(cudaMemset(dlse, 0xFF, std::max<size_t>(nlse, 1) * 4));
      if (dws) CHECK_CUDA(cudaMemset(dws, 0xFF, ws_bytes));
      std::string err = runner->launch(p, 0, g_params);
      if (!err.empty()) {
        std::printf("FAIL [%s] %s: launch error: %s\n", runner->name.c_str(), describe(c).c_str(), err.c_str());
        launch_ok = false;
        break;
      }
      wait_or_report_hang("[" + runner->name + "] " + describe(c));
      CHECK_CUDA(cudaDeviceSynchronize());
      CHECK_CUDA(cudaMemcpy((rep ? ho2 : ho).data(), dout, nq * 2, cudaMemcpyDeviceToHost));
      CHECK_CUDA(cudaMemcpy((rep ? hl2 : hl).data(), dlse, nlse * 4, cudaMemcpyDeviceToHost));
    }
    if (!launch_ok) {
      ++failures;
      continue;
    }
    const bool same = std::memcmp(ho.data(), ho2.data(), nq * 2) == 0 &&
                      std::memcmp(hl.data(), hl2.data(), nlse * 4) == 0;
    size_t nonfinite = 0;
    for (auto x : ho) nonfinite += !std::isfinite(from_bits(x, c.bf16));
    double max_err = 0, max_lse_err = 0;
    size_t lse_bad = 0;
    for (int bh = 0; bh < c.b * c.hq; ++bh) {
      for (size_t ri = 0; ri < rows.size(); ++ri) {
        const int bb = bh / c.hq, h = bh % c.hq, i = rows[ri];
        const size_t r = size_t(bh) * rows.size() + ri;
        for (int t = 0; t < c.d; ++t) {
          const double got = from_bits(ho[((size_t(bb) * c.sq + i) * c.hq + h) * c.d + t], c.bf16);
          max_err = std::max(max_err, std::isfinite(got) ? std::fabs(got - ref_o[r * c.d + t]) : 1e30);
        }
        const float got_lse = hl[(size_t(bb) * c.hq + h) * c.sq + i];
        if (ref_lse[r] > -INFINITY) {
          max_lse_err = std::max(max_lse_err, std::isfinite(got_lse) ? std::fabs(got_lse - ref_lse[r]) : 1e30);
        } else if (!(std::isinf(got_lse) && got_lse < 0)) {
          lse_bad++;  // a row with no visible key (and no sink), or a padding row: -inf
        }
      }
    }
    size_t lse_nan = 0;
    for (auto x : hl) lse_nan += std::isnan(x);
    // Output rounding alone is 2^-9 (bf16) / 2^-12 (fp16) relative; P is rounded the same way.
    const double tol = (c.bf16 ? 2.5e-2 : 4e-3) + 2 * cap_err;
    const double lse_tol = 2e-3 + cap_err;
    const bool pass = nonfinite == 0 && lse_nan == 0 && lse_bad == 0 && max_err <= tol &&
                      max_lse_err <= lse_tol && same;
    *worst_ratio = std::max(*worst_ratio, max_err / tol);
    failures += !pass;
    std::printf("%s [%s] %-55s max|o-ref| %.3e (tol %.1e)  max|lse-ref| %.2e  nonfinite %zu  lse_nan %zu  empty-row-lse-bad %zu  %s\n",
                pass ? "ok  " : "FAIL", runner->name.c_str(), describe(c).c_str(), max_err, tol, max_lse_err, nonfinite,
                lse_nan, lse_bad, same ? "deterministic" : "NOT DETERMINISTIC");
    std::fflush(stdout);
  }
  cudaFree(dq); cudaFree(dk); cudaFree(dv); cudaFree(dout); cudaFree(dlse);
  for (void* d : device_arrays) cudaFree(d);
  return failures;
}

// --bench-window L,R / --bench-softcap C: the variant the --bench rows run (the band and the cap
// only: lengths and ids are device data the timing does not need). TFLOP/s then still count the
// dense or causal pairs: compare the ms column.
static int g_bench_left = kUnb, g_bench_right = kUnb;
static float g_bench_softcap = 0.f;
// --bench-docs N: the --bench rows packed with N equal documents per row (sorted segment ids).
static int g_bench_docs = 0;
// --bench-sinks: the --bench rows with a sink logit per head.
static bool g_bench_sinks = false;

static void bench(const std::vector<int>& seqs, const std::vector<const Runner*>& runners, const std::vector<int>& dims) {
  std::printf("\nkernel-only timing, FA3 grid (bf16, 16k tokens, hidden 2048), median of 20; window (%d, %d), "
              "soft cap %g, %d documents per row (TFLOP/s count the whole row's pairs)\n", g_bench_left,
              g_bench_right, g_bench_softcap, g_bench_docs);
  std::printf("%5s %7s %6s %6s %-18s %10s %9s %9s\n", "hd", "causal", "seq", "batch", "config", "ms", "TFLOP/s",
              "b2b TF/s");
  for (int d : dims) {
    for (int causal = 0; causal < 2; ++causal) {
      for (int s : seqs) {
        const int b = 16384 / s, h = 2048 / d;
        const size_t n = size_t(b) * s * h * d;
        void *q, *k, *v, *o;
        float* lse;
        CHECK_CUDA(cudaMalloc(&q, n * 2));
        CHECK_CUDA(cudaMalloc(&k, n * 2));
        CHECK_CUDA(cudaMalloc(&v, n * 2));
        CHECK_CUDA(cudaMalloc(&o, n * 2));
        CHECK_CUDA(cudaMalloc(&lse, size_t(b) * h * s * 4));
        std::vector<uint16_t> host(n);
        std::mt19937 rng(d * 7 + s);
        std::normal_distribution<float> nd(0.f, 1.f);
        for (auto& x : host) x = to_bits(nd(rng), true);
        CHECK_CUDA(cudaMemcpy(q, host.data(), n * 2, cudaMemcpyHostToDevice));
        CHECK_CUDA(cudaMemcpy(k, host.data(), n * 2, cudaMemcpyHostToDevice));
        CHECK_CUDA(cudaMemcpy(v, host.data(), n * 2, cudaMemcpyHostToDevice));
        FwdProblem p{};
        static_cast<fa4::hopper::ProblemShape&>(p) = {b, s, s, h, h, d, Dtype::kBf16, 1.f / std::sqrt(float(d)),
                                                      causal != 0};
        p.q = q;
        p.k = k;
        p.v = v;
        p.o = o;
        p.lse = lse;
        p.variant.window_left = g_bench_left;
        p.variant.window_right = g_bench_right;
        p.variant.softcap = g_bench_softcap;
        const std::vector<void*> id_mem = set_packed_documents(&p.variant, b, s, g_bench_docs);
        float* sinks = nullptr;
        if (g_bench_sinks) {
          const std::vector<float> host_sinks(size_t(b) * h, 0.5f);
          CHECK_CUDA(cudaMalloc(&sinks, host_sinks.size() * 4));
          CHECK_CUDA(cudaMemcpy(sinks, host_sinks.data(), host_sinks.size() * 4, cudaMemcpyHostToDevice));
          p.variant.sinks = sinks;
        }
        FwdScheduleParams sp;
        sp.section = g_params.section;  // one CTA per SM when timing
        cudaEvent_t e0, e1;
        cudaEventCreate(&e0);
        cudaEventCreate(&e1);
        // Warm-up (check_util.h): the cell's first runner, untimed, before any row.
        for (const Runner* r : runners) {
          if (!runs_at(*r, d)) continue;
          warm_up([&] { return r->launch(p, 0, sp); });
          break;
        }
        for (const Runner* r : runners) {
          if (!runs_at(*r, d)) continue;
          std::vector<float> ms;
          for (int it = 0; it < 25; ++it) {
            cudaEventRecord(e0);
            std::string err = r->launch(p, 0, sp);
            cudaEventRecord(e1);
            if (!err.empty()) { std::printf("launch error %s\n", err.c_str()); std::exit(3); }
            CHECK_CUDA(cudaEventSynchronize(e1));
            float t;
            cudaEventElapsedTime(&t, e0, e1);
            if (it >= 5) ms.push_back(t);
          }
          std::sort(ms.begin(), ms.end());
          const double med = ms[ms.size() / 2];
          // Back to back: 20 launches between two events, no host sync between them (the JAX
          // benchmark's regime: the GPU never idles, so it runs at its sustained clocks, and the
          // host work of each launch hides under the previous kernel). Median of 3 chains.
          std::vector<float> chain_ms;
          for (int rep = 0; rep < 3; ++rep) {
            cudaEventRecord(e0);
            for (int it = 0; it < 20; ++it) r->launch(p, 0, sp);
            cudaEventRecord(e1);
            CHECK_CUDA(cudaEventSynchronize(e1));
            float t;
            cudaEventElapsedTime(&t, e0, e1);
            chain_ms.push_back(t / 20);
          }
          std::sort(chain_ms.begin(), chain_ms.end());
          const double flops = 4.0 * b * h * double(s) * s * d / (causal ? 2 : 1);
          std::printf("%5d %7s %6d %6d %-18s %10.4f %9.1f %9.1f\n", d, causal ? "yes" : "no", s, b, r->name.c_str(),
                      med, flops / med / 1e9, flops / chain_ms[1] / 1e9);
          std::fflush(stdout);
        }
        cudaFree(q); cudaFree(k); cudaFree(v); cudaFree(o); cudaFree(lse);
        for (void* ptr : id_mem) cudaFree(ptr);
        if (sinks != nullptr) cudaFree(sinks);
        cudaEventDestroy(e0);
        cudaEventDestroy(e1);
      }
    }
  }
}

// Kernel-only bandwidth of decode shapes (bf16, causal, key_value_seq_lengths = seq_k as the
// public decode call passes them): bytes of q, k, v and o moved once / time, for the library's
// path (launch_fwd), the decode kernel with its own cut (decode_tiling, also where the library
// prefers another kernel) and the one-tile configuration of the head dim.
struct DecodeCell { int b, sq, sk, hq, hkv, d; };
// --decode-cells: the cells decode_bench times instead of its own.
static std::vector<DecodeCell> g_decode_cells;
// --decode-plans: (splits, CTAs per SM) cuts decode_bench times beside the plan's.
static std::vector<std::pair<int, int>> g_decode_plans;
static void decode_bench() {
  std::vector<DecodeCell> cells = {{16, 1, 8192, 32, 8, 128}, {64, 1, 4096, 32, 8, 128}, {1, 1, 131072, 32, 8, 128},
                                   {8, 1, 32768, 16, 16, 128}, {16, 4, 8192, 32, 8, 128}, {16, 16, 8192, 32, 8, 128},
                                   {16, 1, 1024, 32, 8, 128},  {16, 1, 8192, 32, 8, 64},   {16, 1, 8192, 32, 8, 256},
                                   {4, 8, 16384, 32, 8, 64}};
  if (!g_decode_cells.empty()) cells = g_decode_cells;
  std::printf("\ndecode bandwidth (GB/s, kernel only, chains of 20, median of 3)\n");
  std::printf("%4s %4s %7s %4s %4s %4s %6s %5s %4s %10s %10s %10s %10s %10s\n", "b", "sq", "sk", "hq", "hkv", "d",
              "splits", "rows", "/SM", "us", "library", "decode", "one-tile", "2 CTAs/SM");
  for (const DecodeCell& c : cells) {
    const int d = c.d;
    const size_t nq = size_t(c.b) * c.sq * c.hq * d, nk = size_t(c.b) * c.sk * c.hkv * d;
    void *q, *k, *v, *o, *ws = nullptr;
    float* lse;
    int32_t* lens;
    CHECK_CUDA(cudaMalloc(&q, nq * 2));
    CHECK_CUDA(cudaMalloc(&k, nk * 2));
    CHECK_CUDA(cudaMalloc(&v, nk * 2));
    CHECK_CUDA(cudaMalloc(&o, nq * 2));
    CHECK_CUDA(cudaMalloc(&lse, size_t(c.b) * c.hq * c.sq * 4));
    CHECK_CUDA(cudaMalloc(&lens, c.b * 4));
    std::vector<int32_t> hl(c.b, c.sk);
    CHECK_CUDA(cudaMemcpy(lens, hl.data(), c.b * 4, cudaMemcpyHostToDevice));
    // One random megabyte-sized block, tiled over the tensors (timing only needs finite data).
    std::vector<uint16_t> host(size_t(1) << 20);
    std::mt19937_64 rng(7);
    std::normal_distribution<float> nd(0.f, 1.f);
    for (auto& x : host) x = to_bits(nd(rng), true);
    auto fill = [&](void* dst, size_t n) {
      for (size_t at = 0; at < n; at += host.size())
        CHECK_CUDA(cudaMemcpy(static_cast<uint16_t*>(dst) + at, host.data(), std::min(host.size(), n - at) * 2,
                              cudaMemcpyHostToDevice));
    };
    fill(q, nq);
    fill(k, nk);
    fill(v, nk);
    FwdProblem p{};
    static_cast<fa4::hopper::ProblemShape&>(p) = {c.b, c.sq, c.sk, c.hq, c.hkv, d, Dtype::kBf16,
                                                  1.f / std::sqrt(float(d)), true};
    p.variant.kv_lengths = lens;
    p.q = q, p.k = k, p.v = v, p.o = o, p.lse = lse;
    const auto tiling = fa4::hopper::decode_tiling(c.b, c.sq, c.sk, c.hq, c.hkv, d);
    // The plan's other residency where the tile allows two CTAs per SM and the plan took one: the
    // same cut at two, with the wave model's split count for 2 x 132 slots.
    const auto other = fa4::hopper::decode_tiling(c.b, c.sq, c.sk, c.hq, c.hkv, d, 2);
    const bool has_other = tiling.use && tiling.ctas_per_sm == 1 && other.ctas_per_sm == 2;
    std::vector<fa4::hopper::DecodePlan> forced;
    for (const auto& [splits, per_sm] : g_decode_plans) {
      if (!tiling.use) break;
      auto f = fa4::hopper::decode_tiling(c.b, c.sq, c.sk, c.hq, c.hkv, d, per_sm);
      f.splits = splits;
      const int64_t blocks = (c.sk + fa4::hopper::kDecodeBlockN - 1) / fa4::hopper::kDecodeBlockN;
      f.dependent = fa4::hopper::decode_dependent_launch(f, blocks, d);
      forced.push_back(f);
    }
    size_t ws_bytes = std::max({fa4::hopper::fwd_workspace_bytes(c.b, c.sq, c.sk, c.hq, c.hkv, d),
                                fa4::hopper::decode_workspace_bytes(tiling, c.b, c.hkv, d),
                                fa4::hopper::decode_workspace_bytes(other, c.b, c.hkv, d)});
    for (const auto& f : forced) ws_bytes = std::max(ws_bytes, fa4::hopper::decode_workspace_bytes(f, c.b, c.hkv, d));
    if (ws_bytes) CHECK_CUDA(cudaMalloc(&ws, ws_bytes));
    p.workspace = ws;
    p.workspace_bytes = ws_bytes;
    const double bytes = 2.0 * (nq * 2) + 2.0 * (nk * 2);
    const int n_runs = 4 + int(forced.size());
    std::vector<double> us(n_runs, 0.0);
    for (int which = 0; which < n_runs; ++which) {
      if (which == 1 && !tiling.use) continue;
      if (which == 3 && !has_other) continue;
      auto launch = [&]() -> std::string {
        if (which == 0) return fa4::hopper::launch_fwd(p, 0);
        if (which == 1) return fa4::hopper::launch_decode(p, tiling, 0);
        if (which == 3) return fa4::hopper::launch_decode(p, other, 0);
        if (which >= 4) return fa4::hopper::launch_decode(p, forced[which - 4], 0);
        if (d == 64) return fa4::hopper::launch_fwd_config<fa4::hopper::FwdHd64>(p, 0);
        if (d == 128) return fa4::hopper::launch_fwd_config<fa4::hopper::FwdHd128>(p, 0);
        return fa4::hopper::launch_fwd_config<fa4::hopper::FwdHd256>(p, 0);
      };
      std::string err = launch();
      if (!err.empty()) {
        std::printf("FAIL decode bench launch: %s\n", err.c_str());
        continue;
      }
      CHECK_CUDA(cudaDeviceSynchronize());
      cudaEvent_t e0, e1;
      cudaEventCreate(&e0);
      cudaEventCreate(&e1);
      std::vector<float> t3;
      for (int rep = 0; rep < 3; ++rep) {
        cudaEventRecord(e0);
        for (int it = 0; it < 20; ++it) launch();
        cudaEventRecord(e1);
        CHECK_CUDA(cudaEventSynchronize(e1));
        float t;
        cudaEventElapsedTime(&t, e0, e1);
        t3.push_back(t / 20);
      }
      std::sort(t3.begin(), t3.end());
      us[which] = t3[1] * 1e3;
      cudaEventDestroy(e0);
      cudaEventDestroy(e1);
    }
    auto gbps = [&](double t) { return t > 0 ? bytes / t / 1e3 : 0.0; };
    std::printf("%4d %4d %7d %4d %4d %4d %6d %5d %4d %10.1f %10.0f %10.0f %10.0f %10.0f\n", c.b, c.sq, c.sk, c.hq,
                c.hkv, d, tiling.use ? tiling.splits : 0, tiling.use ? tiling.rows_per_cta : 0,
                tiling.use ? tiling.ctas_per_sm : 0, us[0], gbps(us[0]), gbps(us[1]), gbps(us[2]), gbps(us[3]));
    for (size_t f = 0; f < forced.size(); ++f)
      std::printf("%4s %4s %7s %4s %4s %4s %6d %5d %4d %10.1f %10s %10.0f   (forced plan%s)\n", "", "", "", "", "", "",
                  forced[f].splits, forced[f].rows_per_cta, forced[f].ctas_per_sm, us[4 + f], "", gbps(us[4 + f]),
                  forced[f].dependent ? ", dependent launch" : "");
    std::fflush(stdout);
    cudaFree(q); cudaFree(k); cudaFree(v); cudaFree(o); cudaFree(lse); cudaFree(lens);
    if (ws) cudaFree(ws);
  }
}

// The longest-first order (fwd/tile_order.h lpt_tile_coord) must visit every (m block, head, batch) once,
// and inside a section never a shorter m block before a longer one. Host only; returns failures.
static int check_lpt_order() {
  int bad = 0;
  for (int m_blocks : {1, 2, 11, 16, 128})
    for (int heads : {1, 3, 16, 32})
      for (int batch : {1, 2, 8})
        for (int section : {1, 2, 3, 5, 16, 64, 256}) {
          if (section > heads * batch) continue;
          const int total = m_blocks * heads * batch;
          std::vector<int> seen(total, 0);
          int prev_sec = -1, prev_m = 0;
          for (int t = 0; t < total; ++t) {
            const auto c = fa4::hopper::lpt_tile_coord(t, m_blocks, heads, batch, section);
            const bool in_range = c.m_block >= 0 && c.m_block < m_blocks && c.head >= 0 && c.head < heads &&
                                  c.batch >= 0 && c.batch < batch;
            if (!in_range) { ++bad; continue; }
            seen[(c.batch * heads + c.head) * m_blocks + c.m_block]++;
            const int sec = (c.batch * heads + c.head) / section;
            if (sec == prev_sec && c.m_block > prev_m) ++bad;  // longer after shorter inside a section
            if (sec < prev_sec) ++bad;                            // sections in order
            prev_sec = sec;
            prev_m = c.m_block;
          }
          for (int x : seen) bad += x != 1;
        }
  std::printf("longest-first order: %s\n", bad ? "FAILED" : "every tile once, longest first inside each section");
  return bad;
}

static std::vector<int> parse_list(const char* t) {  // "2048,4096" -> {2048, 4096}
  std::vector<int> out;
  for (; *t; t = std::strchr(t, ',') ? std::strchr(t, ',') + 1 : t + std::strlen(t)) out.push_back(std::atoi(t));
  return out;
}

static std::vector<std::string> split(const std::string& t) {  // "a,b c" -> {"a", "b c"}
  std::vector<std::string> out;
  size_t begin = 0;
  while (begin <= t.size()) {
    const size_t end = t.find(',', begin);
    out.push_back(t.substr(begin, end == std::string::npos ? std::string::npos : end - begin));
    if (end == std::string::npos) break;
    begin = end + 1;
  }
  return out;
}

int main(int argc, char** argv) {
  // Line-buffered: a hang leaves the case it hit as the last line of the log.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  bool do_bench = false, do_check = true, quick = false, variants = true, dense_cases = true, bench_shapes = false;
  bool decode = true, decode_only = false, do_decode_bench = false;
  std::vector<int> seqs = {512, 1024, 2048, 4096, 8192, 16384};
  std::vector<int> only_d;
  std::vector<const Runner*> runners;
  for (const Runner& r : kRunners) runners.push_back(&r);
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--bench")) do_bench = true;
    if (!std::strcmp(argv[i], "--no-check")) do_check = false;
    if (!std::strcmp(argv[i], "--quick")) quick = true;
    if (!std::strcmp(argv[i], "--no-variants")) variants = false;
    if (!std::strcmp(argv[i], "--variants-only")) dense_cases = false;
    if (!std::strcmp(argv[i], "--bench-shapes")) bench_shapes = true;
    if (!std::strcmp(argv[i], "--no-decode")) decode = false;
    if (!std::strcmp(argv[i], "--decode-only")) decode_only = true;
    if (!std::strcmp(argv[i], "--decode-bench")) do_decode_bench = true;
    if (!std::strcmp(argv[i], "--decode-cells") && i + 1 < argc) {  // "b,sq,sk,hq,hkv,d;..."
      std::string all = argv[++i];
      for (size_t at = 0; at <= all.size();) {
        size_t end = all.find(';', at);
        if (end == std::string::npos) end = all.size();
        const std::vector<int> v = parse_list(all.substr(at, end - at).c_str());
        if (v.size() != 6) {
          std::printf("--decode-cells wants b,sq,sk,hq,hkv,d per cell, separated by ';'\n");
          return 2;
        }
        g_decode_cells.push_back({v[0], v[1], v[2], v[3], v[4], v[5]});
        at = end + 1;
      }
    }
    if (!std::strcmp(argv[i], "--decode-plans") && i + 1 < argc) {  // "splits:ctas_per_sm,..."
      for (const std::string& item : split(argv[++i])) {
        int splits = 0, per_sm = 0;
        if (std::sscanf(item.c_str(), "%d:%d", &splits, &per_sm) != 2 || splits < 1 ||
            splits > int(fa4::hopper::kDecodeMaxSplits) || per_sm < 1 || per_sm > 2) {
          std::printf("--decode-plans wants splits:ctas_per_sm items (splits 1..%d, 1 or 2 CTAs per SM), got \"%s\"\n",
                      int(fa4::hopper::kDecodeMaxSplits), item.c_str());
          return 2;
        }
        g_decode_plans.push_back({splits, per_sm});
      }
    }
    if (!std::strcmp(argv[i], "--bench-window") && i + 1 < argc) {
      const std::vector<int> w = parse_list(argv[++i]);
      if (w.size() != 2) {
        std::printf("--bench-window takes L,R\n");
        return 2;
      }
      g_bench_left = std::min(w[0], kUnb), g_bench_right = std::min(w[1], kUnb);
    }
    if (!std::strcmp(argv[i], "--bench-softcap") && i + 1 < argc) g_bench_softcap = float(std::atof(argv[++i]));
    if (!std::strcmp(argv[i], "--bench-docs") && i + 1 < argc) g_bench_docs = std::max(0, std::atoi(argv[++i]));
    if (!std::strcmp(argv[i], "--bench-sinks")) g_bench_sinks = true;
    if (!std::strcmp(argv[i], "--timeout-s") && i + 1 < argc) g_timeout_s = std::atof(argv[++i]);
    if (!std::strcmp(argv[i], "--hd") && i + 1 < argc) only_d.push_back(std::atoi(argv[++i]));
    if (!std::strcmp(argv[i], "--seqs") && i + 1 < argc) seqs = parse_list(argv[++i]);
    if (!std::strcmp(argv[i], "--configs") && i + 1 < argc) {
      runners.clear();
      for (const std::string& name : split(argv[++i])) {
        const Runner* r = find_runner(name);
        if (!r) {
          std::printf("unknown configuration \"%s\" (known: library", name.c_str());
          for (const Runner& k : kRunners) std::printf(", %s", k.name.c_str() + 0);
          std::printf(")\n");
          return 2;
        }
        runners.push_back(r);
      }
    }
    if (!std::strcmp(argv[i], "--max-ctas") && i + 1 < argc) g_params.max_ctas = std::atoi(argv[++i]);
    if (!std::strcmp(argv[i], "--section") && i + 1 < argc) g_params.section = std::atoi(argv[++i]);
  }
  int device = 0, major = 0;
  CHECK_CUDA(cudaGetDevice(&device));
  CHECK_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  if (major != 9) {
    std::printf("needs a Hopper GPU (sm_90a)\n");
    return 2;
  }
  const std::vector<int> dims = only_d.empty() ? std::vector<int>{64, 128, 256} : only_d;
  int failures = check_lpt_order() != 0, total = 0;
  double worst = 0;
  if (do_check && bench_shapes) {
    // The benchmark's variant cells (b, sq, sk, hq, hkv, d, bf16, causal, growth, variant, row
    // stride): the (4096, 0) window runs the one-tile variant kernel (4096 + 128 keys per tile is
    // over the persistent threshold), the (1024, 0) window the persistent one; every selected
    // configuration runs each.
    Variant w4096, w1024, cap, sink, docs;
    w4096.left = 4096, w4096.right = 0;
    w1024.left = 1024, w1024.right = 0;
    cap.softcap = 30.f;
    sink.sinks = true;
    docs.segments = 3;  // 8 documents of 2048
    const Case cells[] = {
        {1, 16384, 16384, 16, 16, 128, true, true, 0.f, w4096, 61},
        {1, 16384, 16384, 16, 16, 128, true, true, 0.f, w1024, 61},
        {1, 16384, 16384, 16, 16, 128, true, true, 0.f, cap, 61},
        {1, 16384, 16384, 16, 16, 128, true, true, 0.f, sink, 61},
        {1, 16384, 16384, 16, 16, 128, true, true, 0.f, docs, 61},
    };
    uint64_t seed = 1000;
    for (const Case& c : cells) failures += run_case(c, seed++, &worst, runners, &total);
    std::printf("\n%d/%d benchmark-shape cases passed (case x configuration runs); worst max-error / tolerance = %.3f\n",
                total - failures, total, worst);
  } else if (do_check && decode_only) {
  } else if (do_check) {
    // b, sq, sk, hq, hkv. sk = -1: long keys so that the longest-first (head, batch) sections are
    // 3 pairs of the 4 (sections 3, 1: 32 MB / (sk * d * 4 bytes / group) = 3).
    const Case shapes[] = {
        {1, 1, 1, 1, 1, 0, true, false},      {3, 17, 17, 2, 1, 0, true, false},
        {1, 127, 127, 4, 2, 0, true, false},  {2, 1000, 1000, 2, 2, 0, true, false},
        {1, 3000, 3000, 1, 1, 0, true, false}, {1, 200, 1000, 8, 1, 0, true, false},
        {1, 1000, 200, 4, 4, 0, true, false}, {1, 5, 0, 2, 1, 0, true, false},
        {2, 300, 301, 8, 8, 0, true, false},  {1, 385, 700, 2, 1, 0, true, false},
        {1, 200, -1, 4, 4, 0, true, false},
        // The running max moves by ~11 (log2 units) per 128-key block, by ~4 per block, and never
        // after the first block computed.
        {1, 300, 1000, 2, 1, 0, true, false, 60.f}, {1, 200, 3000, 2, 2, 0, true, false, 60.f},
        {2, 257, 777, 2, 2, 0, true, false, -60.f},
    };
    uint64_t seed = 1;
    for (int d : dims)
      for (int bf16 = 1; bf16 >= (quick ? 1 : 0) && dense_cases; --bf16)
        for (int causal = 0; causal < 2; ++causal)
          for (Case c : shapes) {
            // --quick: a ragged GQA shape, a multi-block one and an empty key range.
            if (quick && !((c.sq == 17 && c.sk == 17) || (c.sq == 300 && c.sk == 301) || c.sk == 0)) continue;
            c.d = d;
            c.bf16 = bf16;
            c.causal = causal;
            if (c.sk < 0) c.sk = 40000 * 64 / d;
            failures += run_case(c, seed++, &worst, runners, &total);
          }
    // The attention variants: b, sq, sk, hq, hkv, (d), (dtype), causal, growth, variant.
    auto win = [](int left, int right) {
      Variant v;
      v.left = left;
      v.right = right;
      return v;
    };
    auto with = [](Variant v, int lengths, int segments, float softcap, bool sinks) {
      v.lengths = lengths;
      v.segments = segments;
      v.softcap = softcap;
      v.sinks = sinks;
      return v;
    };
    const Variant none;
    const Case variant_cases[] = {
        // Sliding windows: causal (w, 0) and two-sided, over several blocks (block skipping at
        // both ends of the band), one of them long enough that most key blocks are skipped.
        {2, 1000, 1000, 2, 1, 0, true, true, 0.f, win(64, 0)},
        {1, 777, 1200, 4, 2, 0, true, false, 0.f, win(300, 100)},
        {1, 4000, 4000, 2, 2, 0, true, true, 0.f, win(1024, 0)},
        {1, 700, 300, 2, 1, 0, true, false, 0.f, win(kUnb, 40)},
        {1, 300, 700, 2, 1, 0, true, false, 0.f, win(40, kUnb)},
        // A band that misses the diagonal (ring attention's negative bounds): many empty rows.
        {1, 500, 500, 2, 2, 0, true, false, 0.f, win(-50, 100)},
        {1, 500, 640, 2, 2, 0, true, false, 0.f, win(200, -130)},
        // Query / key lengths (padding rows, padding query tiles, an empty batch entry), causal
        // and not, kv lengths alone.
        {4, 500, 700, 2, 1, 0, true, false, 0.f, with(none, 1, 0, 0.f, false)},
        {4, 700, 500, 2, 2, 0, true, true, 0.f, with(none, 1, 0, 0.f, false)},
        {3, 300, 1000, 4, 2, 0, true, true, 0.f, with(none, 2, 0, 0.f, false)},
        // Segment ids: sorted (packed documents: blocks between documents skipped), causal and
        // not; unsorted (exact, less skipping); separate q / kv ids of different lengths.
        {2, 1500, 1500, 2, 1, 0, true, true, 0.f, with(none, 0, 1, 0.f, false)},
        {1, 1000, 1000, 2, 2, 0, true, false, 0.f, with(none, 0, 1, 0.f, false)},
        {1, 600, 600, 2, 2, 0, true, false, 0.f, with(none, 0, 2, 0.f, false)},
        {2, 300, 900, 2, 1, 0, true, false, 0.f, with(none, 0, 1, 0.f, false)},
        // Soft cap, saturating (5) and mild (30), dense and causal.
        {1, 500, 800, 2, 1, 0, true, false, 0.f, with(none, 0, 0, 30.f, false)},
        {2, 600, 600, 2, 2, 0, true, true, 0.f, with(none, 0, 0, 5.f, false)},
        // Sinks: dense, causal, and with a band that leaves rows empty (o 0, lse = sink).
        {2, 400, 400, 4, 2, 0, true, false, 0.f, with(none, 0, 0, 0.f, true)},
        {1, 500, 300, 2, 1, 0, true, true, 0.f, with(none, 0, 0, 0.f, true)},
        {1, 500, 500, 2, 2, 0, true, false, 0.f, with(win(-50, 100), 0, 0, 0.f, true)},
        // Everything together, GQA.
        {3, 900, 1100, 4, 2, 0, true, true, 0.f, with(win(256, 0), 1, 1, 20.f, true)},
        {4, 700, 700, 4, 1, 0, true, false, 0.f, with(win(128, 64), 1, 2, 0.f, true)},
        {2, 1000, 1000, 2, 2, 0, true, true, 0.f, with(win(300, 0), 0, 1, 0.f, false)},
        // Two interleaved documents (no uniform run), causal and not.
        {2, 1100, 1100, 2, 1, 0, true, true, 0.f, with(none, 0, 4, 0.f, false)},
        {1, 900, 900, 2, 2, 0, true, false, 0.f, with(none, 0, 4, 0.f, false)},
        // The soft cap's bounded softmax (bf16, c <= 50; fp16 runs the online one), all in the
        // variant kernel: non-causal with scores from -120 up to 0; causal at the largest cap,
        // where the first rows see only scores near -150 (tanh about -1: every p of the row at the
        // smallest, 2^-112); causal with sinks and GQA; a bf16 cap above the bound (the online
        // softmax).
        {1, 500, 800, 2, 1, 0, true, false, -120.f, with(none, 0, 0, 41.5f, false)},
        {1, 500, 800, 2, 1, 0, true, true, 0.f, with(none, 0, 0, 60.f, false)},
        {2, 600, 600, 2, 1, 0, true, true, -150.f, with(none, 0, 0, 50.f, false)},
        {2, 700, 700, 4, 2, 0, true, true, 0.f, with(none, 0, 0, 30.f, true)},
    };
    for (int d : dims)
      for (int bf16 = 1; bf16 >= (quick ? 1 : 0) && variants; --bf16)
        for (size_t k = 0; k < sizeof(variant_cases) / sizeof(variant_cases[0]); ++k) {
          Case c = variant_cases[k];
          // --quick: a window with lengths and sorted ids (the combination case), sinks with
          // empty rows, and the causal bounded soft cap with sinks; fp16 only for half of
          // the cases (the kernels are dtype-generic).
          if (quick && !(k == 19 || k == 18 || k == 27)) continue;
          if (!bf16 && k % 2) continue;
          c.d = d;
          c.bf16 = bf16;
          failures += run_case(c, seed++, &worst, runners, &total);
        }
    std::printf("\n%d/%d cases passed (case x configuration runs); worst max-error / tolerance = %.3f\n", total - failures,
                total, worst);
  }
  if (do_check && !bench_shapes && decode && !quick) {
    // Decode shapes (decode/plan.h: the split-KV path through the library's entry): few query
    // rows per kv head against long keys, every GQA ratio we ship, cache lengths short / full /
    // 0 / random / 1 (batch entries 0-5), NaN in K and V past each cache length; b, sq, sk, hq, hkv.
    auto var_of = [](int left, int right, int lengths, int segments, float softcap, bool sinks) {
      Variant v;
      v.left = left, v.right = right, v.lengths = lengths, v.segments = segments, v.softcap = softcap, v.sinks = sinks;
      return v;
    };
    const Case decode_cases[] = {
        {6, 1, 2049, 32, 8, 0, true, true, 0.f, var_of(kUnb, kUnb, 2, 0, 0.f, false)},
        {6, 2, 700, 8, 1, 0, true, true, 0.f, var_of(kUnb, kUnb, 2, 0, 0.f, false)},
        {6, 16, 1500, 4, 4, 0, true, true, 0.f, var_of(kUnb, kUnb, 2, 0, 0.f, false)},
        {3, 16, 3000, 8, 2, 0, true, true, 0.f, var_of(kUnb, kUnb, 0, 0, 0.f, false)},
        {2, 1, 9000, 16, 2, 0, true, false, 0.f, var_of(kUnb, kUnb, 0, 0, 0.f, false)},
        {1, 1, 70000, 4, 1, 0, true, true, 0.f, var_of(kUnb, kUnb, 0, 0, 0.f, false)},
        {6, 4, 1000, 6, 3, 0, true, true, 0.f, var_of(64, 0, 1, 0, 20.f, true)},
        {2, 3, 900, 4, 2, 0, true, false, 0.f, var_of(kUnb, kUnb, 0, 1, 0.f, false)},
        {6, 1, 5000, 2, 2, 0, true, true, 0.f, var_of(1000, 0, 2, 0, 0.f, true)},
        // No GQA, 128 (batch, head) pairs of one row tile: decode_plan keeps the decode kernel.
        {8, 1, 1500, 16, 16, 0, true, true, 0.f, var_of(kUnb, kUnb, 2, 0, 0.f, false)},
        // More than 16 rows: the head dim's larger tile (24 rows: one partial tile at hd64 / hd128;
        // 40 rows: two tiles at hd128, three at hd256).
        {3, 3, 2500, 8, 1, 0, true, true, 0.f, var_of(kUnb, kUnb, 2, 0, 0.f, false)},
        {6, 10, 1800, 8, 2, 0, true, true, 0.f, var_of(kUnb, kUnb, 2, 0, 0.f, true)},
    };
    std::vector<const Runner*> library = {&kRunners[0]};
    uint64_t seed = 5000;
    int decode_total = 0, decode_fail = 0;
    double decode_worst = 0;
    for (int d : dims)
      for (int bf16 = 1; bf16 >= 0; --bf16)
        for (Case c : decode_cases) {
          c.d = d;
          c.bf16 = bf16;
          c.nan_v_padding = true;
          c.row_stride = 1;
          decode_fail += run_case(c, seed++, &decode_worst, library, &decode_total);
        }
    std::printf("\n%d/%d decode cases passed (library); worst max-error / tolerance = %.3f\n",
                decode_total - decode_fail, decode_total, decode_worst);
    failures += decode_fail;
  }
  if (do_decode_bench) decode_bench();
  if (do_bench) bench(seqs, runners, dims);
  return failures == 0 ? 0 : 1;
}
