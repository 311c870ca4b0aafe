// Standalone check of the Hopper backward kernels, no JAX involved: random q, k, v, dO and lse
// cotangent, the forward's o and lse from a float64 CPU forward, outputs (and the workspace)
// poisoned with NaN before each launch, dq/dk/dv compared with a float64 CPU backward; every run
// launches twice (dk, dv must repeat bitwise; in deterministic mode dq too). Each case runs
// through the library's entry point (launch_bwd: the configuration and schedule of bwd_plan) and
// through every named configuration of its head dim (launch_bwd_config<Cfg>, the heuristics'
// schedule unless --lpt / --max-ctas say otherwise), in the default and the deterministic mode
// (not for the persistent configuration, which has none). Then (--bench) kernel-only timings of
// the whole backward (preprocess + main + postprocess) on the FlashAttention-3 grid;
// --deterministic-bench adds the deterministic mode's rows. A hang in the deterministic mode (a
// semaphore never reaching its value, a barrier or setmaxnreg nobody completes) prints
// "HANG <configuration> <case>" once a run exceeds --timeout seconds (default 30) and exits 3;
// stdout is line-buffered, so a redirected log shows every finished line. Build (on the GPU machine):
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -Icuda \
//        -Xcompiler -fopenmp tests/gpu/cuda/bwd_kernel_check.cu cuda/hopper/bwd/*.cu \
//        cuda/hopper/common/tensor_map.cu -o bwd_check
// Options: --config NAME (repeatable: "library", "hd64", "hd128", "hd128 (80x128)" (dense cases
// only), "hd128 persistent", "hd256 (64x80)"; default all), --hd D (repeatable), --lpt 0|1, --lpt-section N (N (batch, kv
// head) pairs a longest-first section, key block major inside it; on every configuration's
// schedule), --max-ctas N, --modes 0,1
// (0 default, 1 deterministic), --no-check, --bench, --quick-bench, --deterministic-bench,
// --seqs 2048,16384, --timeout S (seconds before a run counts as hung).
// Attention variants (issue 20): after the dense / causal shapes the check runs a suite of variant
// cases (window bands, negative ring bounds, padding lengths with out-of-range values, sorted and
// unsorted segment ids, soft cap, sinks in the forward's lse, and all of them combined with GQA);
// --no-variants skips it, --variants-only runs it alone. --window L,R (a bound >= 1073741824 is
// unbounded), --lengths, --segments sorted|unsorted|interleaved, --softcap C and --sinks apply one variant to
// the dense / causal shape list instead, and --window / --softcap to the --bench rows; --bench-docs
// N packs the --bench rows with N equal documents (sorted segment ids); --bench-heads H and
// --bench-heads-kv HKV set their query and kv heads (GQA rows; HKV must divide H). The
// persistent configuration runs dense and causal only, so variant cases skip it.
// --probe (with --bench, in a build where every source has -DFA4_BWD_PHASE_PROBE=1): after each
// timed row of the hd64 / hd128 grid kernel, one launch records when each CTA reaches each phase
// (bwd/probe.cuh) and a line summarises it: setup, K/V arrival, first step, a steady step, the
// last dQ, the dV and dK stores, the gap between CTAs on an SM, the last wave's tail.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "check_util.h"
#include "hopper/bwd/config.cuh"
#include "hopper/bwd/heuristics.h"
#include "hopper/bwd/launch.h"
#if FA4_BWD_PHASE_PROBE
#include "hopper/bwd/probe.cuh"
#endif

using fa4::hopper::BwdProblem;
using fa4::hopper::BwdSchedule;
using fa4::hopper::BwdWorkspace;
using fa4::hopper::Dtype;

// What a run launches: the library's entry point, or one named configuration.
using ConfigLaunch = std::string (*)(const BwdProblem&, const BwdWorkspace&, cudaStream_t, const BwdSchedule&);
struct Target {
  const char* name;
  int head_dim;  // 0: any (the library)
  bool persistent;
  bool dense_only;      // runs dense problems without a mask only (the 80-row hd128 tile)
  ConfigLaunch launch;  // null: the library
};
template <class Cfg>
constexpr Target config_target() {
  return {Cfg::name(), Cfg::head_dim(), Cfg::persistent(), Cfg::dense_only(), fa4::hopper::launch_bwd_config<Cfg>};
}
static const Target kTargets[] = {
    {"library", 0, false, false, nullptr},
    config_target<fa4::hopper::BwdHd64>(),
    config_target<fa4::hopper::BwdHd64Persistent>(),
    config_target<fa4::hopper::BwdHd128>(),
    config_target<fa4::hopper::BwdHd128Rows80>(),
    config_target<fa4::hopper::BwdHd128Persistent>(),
    config_target<fa4::hopper::BwdHd256>(),
};

// Schedule overrides (-1: the heuristics' choice).
static int g_lpt = -1;
static int g_lpt_section = 0;  // --lpt-section N: N (batch, kv head) pairs a section (0: as --lpt / the plan)
static int g_max_ctas = 0;
// --bench-docs N: the --bench rows packed with N equal documents per row (sorted segment ids).
static int g_bench_docs = 0;
// --bench-heads H, --bench-heads-kv HKV: the --bench rows' query and kv heads (default 2048 / d
// each: the FA3 grid's hidden 2048 without GQA).
static int g_bench_heads = 0, g_bench_heads_kv = 0;

[[maybe_unused]] static bool g_probe = false;  // --probe (a FA4_BWD_PHASE_PROBE=1 build)

#if FA4_BWD_PHASE_PROBE
// One probed launch (bwd/probe.cuh) of what `launch` enqueues, summarised: mean time per phase of
// a CTA, the gap between one CTA's end and the next one's start on the same SM, how busy the SMs
// were over the kernel's span, and the last wave's tail.
template <class Launch>
static void probe_report(const char* name, int64_t tiles, Launch launch) {
  using fa4::hopper::kBwdProbeEvents;
  namespace h = fa4::hopper;
  long long* buf;
  const size_t n = size_t(tiles) * kBwdProbeEvents;
  CHECK_CUDA(cudaMalloc(&buf, n * 8));
  CHECK_CUDA(cudaMemset(buf, 0, n * 8));
  h::bwd_set_phase_probe(buf, tiles);
  launch();
  CHECK_CUDA(cudaDeviceSynchronize());
  h::bwd_set_phase_probe(nullptr, 0);
  std::vector<long long> v(n);
  CHECK_CUDA(cudaMemcpy(v.data(), buf, n * 8, cudaMemcpyDeviceToHost));
  cudaFree(buf);
  auto at = [&](size_t c, int e) { return double(v[c * kBwdProbeEvents + e]); };
  double t0 = 1e300, t1 = 0, sum[h::kBwdProbeEvents] = {}, steps = 0, per_step = 0, n_multi = 0, cta_us = 0;
  size_t ctas = 0;
  std::map<int, std::vector<std::pair<double, double>>> by_sm;
  for (size_t c = 0; c < size_t(tiles); ++c) {
    if (at(c, h::kBwdProbeEntry) == 0 || at(c, h::kBwdProbeDkOut) == 0) continue;  // no record
    const double end = std::max(at(c, h::kBwdProbeDkOut), at(c, h::kBwdProbeWriterEnd));
    t0 = std::min(t0, at(c, h::kBwdProbeEntry));
    t1 = std::max(t1, end);
    // Each phase from the event before it.
    const int order[] = {h::kBwdProbeEntry, h::kBwdProbeSetup, h::kBwdProbeKv, h::kBwdProbeFirstStep,
                         h::kBwdProbeLoopEnd, h::kBwdProbeLastDq, h::kBwdProbeDvOut, h::kBwdProbeDkOut};
    for (int i = 1; i < 8; ++i) sum[order[i]] += at(c, order[i]) - at(c, order[i - 1]);
    const double s_ = at(c, h::kBwdProbeSteps);
    steps += s_;
    if (s_ > 1) {
      per_step += (at(c, h::kBwdProbeLoopEnd) - at(c, h::kBwdProbeFirstStep)) / (s_ - 1);
      n_multi += 1;
    }
    cta_us += end - at(c, h::kBwdProbeEntry);
    by_sm[int(at(c, h::kBwdProbeSm))].push_back({at(c, h::kBwdProbeEntry), end});
    ++ctas;
  }
  if (ctas == 0) {
    std::printf("probe %s: no CTA recorded (the probe covers the hd64 / hd128 grid kernel)\n", name);
    return;
  }
  double gap = 0, gaps = 0, busy = 0, tail = 0;
  for (auto& kv : by_sm) {
    auto& l = kv.second;
    std::sort(l.begin(), l.end());
    for (size_t i = 0; i + 1 < l.size(); ++i) gap += l[i + 1].first - l[i].second, gaps += 1;
    for (auto& e : l) busy += e.second - e.first;
    tail += t1 - l.back().second;
  }
  const double k = 1e-3 / double(ctas);  // ns summed over CTAs -> mean us
  std::printf("probe %s: %zu CTAs on %zu SMs, span %.1f us; mean us a CTA: setup %.2f, K/V %.2f, first step %.2f, "
              "step %.3f (%.1f steps), last dQ %.2f, dV out %.2f, dK out %.2f, CTA %.2f; between CTAs on an SM %.2f; "
              "SMs busy %.1f%% of the span; last-wave tail %.1f us an SM\n",
              name, ctas, by_sm.size(), (t1 - t0) * 1e-3, sum[h::kBwdProbeSetup] * k, sum[h::kBwdProbeKv] * k,
              sum[h::kBwdProbeFirstStep] * k, n_multi > 0 ? per_step / n_multi * 1e-3 : 0.0, steps / double(ctas),
              sum[h::kBwdProbeLastDq] * k, sum[h::kBwdProbeDvOut] * k, sum[h::kBwdProbeDkOut] * k, cta_us * k,
              gaps > 0 ? gap / gaps * 1e-3 : 0.0, 100.0 * busy / (double(by_sm.size()) * (t1 - t0)),
              tail / double(by_sm.size()) * 1e-3);
}
#endif

static std::string launch_target(const Target& t, const BwdProblem& p, const BwdWorkspace& ws) {
  if (!t.launch) return fa4::hopper::launch_bwd(p, ws, 0);
  BwdSchedule s;
  if (p.heads_kv > 0) s = fa4::hopper::bwd_plan(p).schedule;
  if (g_lpt >= 0) s.lpt_section = g_lpt && p.heads_kv > 0 ? fa4::hopper::bwd_lpt_section(p) : 0;
  if (g_lpt_section > 0) s.lpt_section = int(std::min<int64_t>(g_lpt_section, p.heads_kv * p.batch));
  s.max_ctas = g_max_ctas;
  return t.launch(p, ws, 0, s);
}
static bool target_runs(const Target& t, int d, bool det, bool variant, bool causal) {
  return (t.head_dim == 0 || t.head_dim == d) && !(det && t.persistent) && !(variant && t.persistent) &&
         !(t.dense_only && (variant || causal));
}

constexpr int kUnb = fa4::hopper::kWindowUnbounded;

// The variant of a case (issue 20): defaults are plain dense / causal attention.
struct Variant {
  int left = kUnb, right = kUnb;  // window band around the diagonal (may be negative)
  bool lengths = false;           // random q / kv lengths per batch entry (some out of [0, seq])
  int segments = 0;               // 0 none, 1 sorted (packed documents), 2 unsorted ids, 3 two
                                  // interleaved documents (whole 64-row chunks of ids 1 and 2 in
                                  // random order, a quarter of the chunks split between them)
  float softcap = 0.f;
  bool sinks = false;             // a sink logit per q head in the forward's lse
  bool any() const { return left < kUnb || right < kUnb || lengths || segments || softcap > 0 || sinks; }
};

struct Case {
  int b, sq, sk, hq, hkv, d;
  bool bf16, causal, with_dlse;
  Variant v = {};
};

static std::string describe(const Case& c) {
  char buf[320];
  std::string var;
  auto bound = [](int x) { return x >= kUnb ? std::string("inf") : std::to_string(x); };
  if (c.v.left < kUnb || c.v.right < kUnb) var += " win(" + bound(c.v.left) + "," + bound(c.v.right) + ")";
  if (c.v.lengths) var += " lens";
  if (c.v.segments) var += c.v.segments == 1 ? " seg-sorted" : c.v.segments == 2 ? " seg-unsorted" : " seg-interleaved";
  if (c.v.softcap > 0) var += " cap" + std::to_string(int(c.v.softcap));
  if (c.v.sinks) var += " sinks";
  std::snprintf(buf, sizeof buf, "b=%d sq=%d sk=%d hq=%d hkv=%d d=%d %s %s%s%s", c.b, c.sq, c.sk, c.hq, c.hkv, c.d,
                c.bf16 ? "bf16" : "fp16", c.causal ? "causal" : "full", c.with_dlse ? " +dlse" : "", var.c_str());
  return buf;
}

// The variant's per-batch inputs as the kernels get them (host copies).
struct VariantInputs {
  std::vector<int32_t> q_len, kv_len;      // raw (unclamped) lengths, [b]
  std::vector<int32_t> q_ids, kv_ids;      // [b, sq], [b, sk]
  std::vector<int32_t> q_rng, kv_rng;      // [b, ceil(s / 64), 2]
  std::vector<float> sinks;                // [hq]
};

static VariantInputs make_variant_inputs(const Case& c, std::mt19937_64& rng) {
  VariantInputs in;
  if (c.v.lengths) {
    // Mostly inside [0, seq], with the ends and out-of-range values (clamped by the kernels).
    auto len = [&](int s) {
      const int r = int(rng() % 10);
      if (r == 0) return 0;
      if (r == 1) return s;
      if (r == 2) return s + 7;
      if (r == 3) return -3;
      return int(rng() % (s + 1));
    };
    for (int bb = 0; bb < c.b; ++bb) {
      in.q_len.push_back(len(c.sq));
      in.kv_len.push_back(len(c.sk));
    }
  }
  if (c.v.segments) {
    auto ids = [&](int s, std::vector<int32_t>& out, uint64_t seed) {
      std::mt19937_64 r2(seed);
      for (int bb = 0; bb < c.b; ++bb) {
        if (c.v.segments == 1) {
          // Packed documents: ids non-decreasing, documents of 1 .. s / 3 positions, placed by
          // fraction of the sequence so that q and kv documents line up when seq_q != seq_k.
          int id = 0;
          double next = 0;
          for (int i = 0; i < s; ++i) {
            while (double(i) / std::max(s, 1) >= next) {
              ++id;
              next += double(1 + r2() % std::max(1, s / 3)) / std::max(s, 1);
            }
            out.push_back(id);
          }
        } else if (c.v.segments == 3) {
          // Interleaved: a key block's rows of one document are not one range of query blocks.
          const std::vector<int32_t> row = interleaved_document_ids(s, r2);
          out.insert(out.end(), row.begin(), row.end());
        } else {
          for (int i = 0; i < s; ++i) out.push_back(int(r2() % 3));
        }
      }
    };
    const uint64_t seed = rng();
    ids(c.sq, in.q_ids, seed);
    if (c.sq == c.sk && c.v.segments != 2) {
      in.kv_ids = in.q_ids;
    } else {
      ids(c.sk, in.kv_ids, c.v.segments == 1 ? seed : rng());
    }
    in.q_rng = segment_chunk_ranges(in.q_ids, c.b, c.sq);
    in.kv_rng = segment_chunk_ranges(in.kv_ids, c.b, c.sk);
  }
  if (c.v.sinks) {
    std::normal_distribution<float> nd(0.f, 1.f);
    for (int h = 0; h < c.hq; ++h) in.sinks.push_back(nd(rng));
  }
  return in;
}

// Float64 forward and backward of one problem. Inputs are the rounded 16-bit values (as floats).
struct Reference {
  std::vector<double> o, lse, dq, dk, dv;
};

static Reference reference(const Case& c, const std::vector<float>& q, const std::vector<float>& k,
                           const std::vector<float>& v, const std::vector<float>& dout,
                           const std::vector<float>& dlse, double scale, const VariantInputs& vin) {
  const int group = c.hq / c.hkv;
  const size_t nq = size_t(c.b) * c.sq * c.hq * c.d, nk = size_t(c.b) * c.sk * c.hkv * c.d;
  Reference r;
  r.o.assign(nq, 0.0);
  r.dq.assign(nq, 0.0);
  r.lse.assign(size_t(c.b) * c.hq * c.sq, -INFINITY);
  r.dk.assign(nk, 0.0);
  r.dv.assign(nk, 0.0);
  // dK/dV per q head (summed over the group afterwards), so the (b, h) loop runs in parallel.
  std::vector<double> dk_h(size_t(c.b) * c.hq * c.sk * c.d, 0.0), dv_h(dk_h.size(), 0.0);
  auto qi = [&](int bb, int i, int h) { return ((size_t(bb) * c.sq + i) * c.hq + h) * c.d; };
  auto ki = [&](int bb, int j, int h) { return ((size_t(bb) * c.sk + j) * c.hkv + h) * c.d; };
  const double cap = c.v.softcap;
#pragma omp parallel for schedule(dynamic)
  for (int bh = 0; bh < c.b * c.hq; ++bh) {
    const int bb = bh / c.hq, h = bh % c.hq, kvh = h / group;
    double* dkh = dk_h.data() + size_t(bh) * c.sk * c.d;
    double* dvh = dv_h.data() + size_t(bh) * c.sk * c.d;
    // The variant's visibility (variants-contract.md): lengths clamped, off = kv_len - q_len,
    // causal folded into the right bound, segment ids equal.
    const int q_len = vin.q_len.empty() ? c.sq : std::clamp(vin.q_len[bb], 0, c.sq);
    const int kv_len = vin.kv_len.empty() ? c.sk : std::clamp(vin.kv_len[bb], 0, c.sk);
    const int off = kv_len - q_len;
    const int right = c.causal ? std::min(c.v.right, 0) : c.v.right;
    std::vector<double> p(std::max(c.sk, 1)), dp(std::max(c.sk, 1)), g(std::max(c.sk, 1));
    std::vector<int> keys;
    for (int i = 0; i < q_len; ++i) {
      keys.clear();
      for (int j = 0; j < kv_len; ++j) {
        if (c.v.left < kUnb && j < i + off - c.v.left) continue;
        if (right < kUnb && j > i + off + right) continue;
        if (!vin.q_ids.empty() && vin.q_ids[size_t(bb) * c.sq + i] != vin.kv_ids[size_t(bb) * c.sk + j]) continue;
        keys.push_back(j);
      }
      const bool sink = !vin.sinks.empty();
      if (keys.empty() && !sink) continue;  // sees no key: o = 0, lse = -inf, no gradient
      double m = sink ? double(vin.sinks[h]) : -INFINITY;
      for (int j : keys) {
        double acc = 0;
        for (int t = 0; t < c.d; ++t) acc += double(q[qi(bb, i, h) + t]) * double(k[ki(bb, j, kvh) + t]);
        double sc = acc * scale;
        g[j] = 1.0;
        if (cap > 0) {
          const double th = std::tanh(sc / cap);
          sc = cap * th;
          g[j] = 1.0 - th * th;
        }
        p[j] = sc;
        m = std::max(m, p[j]);
      }
      double l = sink ? std::exp(double(vin.sinks[h]) - m) : 0.0;
      for (int j : keys) l += (p[j] = std::exp(p[j] - m));
      for (int j : keys) p[j] /= l;
      double* o = r.o.data() + qi(bb, i, h);
      for (int j : keys)
        for (int t = 0; t < c.d; ++t) o[t] += p[j] * double(v[ki(bb, j, kvh) + t]);
      const size_t li = (size_t(bb) * c.hq + h) * c.sq + i;
      r.lse[li] = m + std::log(l);
      double delta = 0;
      for (int t = 0; t < c.d; ++t) delta += double(dout[qi(bb, i, h) + t]) * o[t];
      double* dq = r.dq.data() + qi(bb, i, h);
      for (int j : keys) {
        double acc = 0;
        for (int t = 0; t < c.d; ++t) acc += double(dout[qi(bb, i, h) + t]) * double(v[ki(bb, j, kvh) + t]);
        const double ds = p[j] * (acc - delta + double(dlse[li])) * g[j];
        for (int t = 0; t < c.d; ++t) {
          dq[t] += scale * ds * double(k[ki(bb, j, kvh) + t]);
          dkh[size_t(j) * c.d + t] += scale * ds * double(q[qi(bb, i, h) + t]);
          dvh[size_t(j) * c.d + t] += p[j] * double(dout[qi(bb, i, h) + t]);
        }
      }
    }
  }
  for (int bh = 0; bh < c.b * c.hq; ++bh) {
    const int bb = bh / c.hq, h = bh % c.hq, kvh = h / group;
    for (int j = 0; j < c.sk; ++j)
      for (int t = 0; t < c.d; ++t) {
        r.dk[ki(bb, j, kvh) + t] += dk_h[(size_t(bh) * c.sk + j) * c.d + t];
        r.dv[ki(bb, j, kvh) + t] += dv_h[(size_t(bh) * c.sk + j) * c.d + t];
      }
  }
  return r;
}

struct Err {
  double max_err = 0, max_ref = 0;
  size_t nonfinite = 0;
};
static Err compare(const std::vector<uint16_t>& got, const std::vector<double>& ref, bool bf16) {
  Err e;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double g = from_bits(got[i], bf16);
    e.max_ref = std::max(e.max_ref, std::fabs(ref[i]));
    if (!std::isfinite(g)) {
      e.nonfinite++;
      continue;
    }
    e.max_err = std::max(e.max_err, std::fabs(g - ref[i]));
  }
  return e;
}


// Which modes the check runs (--modes, default both): 0 default, 1 deterministic.
static bool g_modes[2] = {true, true};

// Seconds a run may take before it counts as hung (--timeout).
static int g_timeout_s = 30;

// Waits for the legacy default stream (every launch of a run goes there) at most `seconds`:
// cudaErrorNotReady when it is still busy then, else the synchronize's result.
static cudaError_t wait_for_device(int seconds) {
  const auto t0 = std::chrono::steady_clock::now();
  while (true) {
    const cudaError_t q = cudaStreamQuery(0);
    if (q != cudaErrorNotReady) break;
    if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(seconds)) return cudaErrorNotReady;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return cudaDeviceSynchronize();
}

// Runs one case for every selected target and mode, two launches each; returns the number of
// failing runs.
static int run_case(const Case& c, uint64_t seed, double* worst_ratio, const std::vector<const Target*>& targets,
                    int* runs) {
  const size_t nq = size_t(c.b) * c.sq * c.hq * c.d, nk = size_t(c.b) * c.sk * c.hkv * c.d;
  const size_t nlse = size_t(c.b) * c.hq * c.sq;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<uint16_t> hq(nq), hk(nk), hv(nk), hdo(nq);
  std::vector<float> fq(nq), fk(nk), fv(nk), fdo(nq), dlse(nlse, 0.f);
  auto fill = [&](std::vector<uint16_t>& bits, std::vector<float>& f) {
    for (size_t i = 0; i < bits.size(); ++i) {
      bits[i] = to_bits(nd(rng), c.bf16);
      f[i] = from_bits(bits[i], c.bf16);
    }
  };
  fill(hq, fq);
  fill(hk, fk);
  fill(hv, fv);
  fill(hdo, fdo);
  if (c.with_dlse)
    for (auto& x : dlse) x = nd(rng);
  const double scale = 1.0 / std::sqrt(double(c.d));
  const VariantInputs vin = make_variant_inputs(c, rng);
  Reference ref = reference(c, fq, fk, fv, fdo, dlse, scale, vin);
  // The forward's outputs as the kernel would see them: o rounded to the input dtype, lse float.
  std::vector<uint16_t> ho(nq);
  for (size_t i = 0; i < nq; ++i) ho[i] = to_bits(float(ref.o[i]), c.bf16);
  std::vector<float> hlse(nlse);
  for (size_t i = 0; i < nlse; ++i) hlse[i] = float(ref.lse[i]);

  auto dev = [](size_t bytes) {
    void* p;
    CHECK_CUDA(cudaMalloc(&p, std::max<size_t>(bytes, 16)));
    return p;
  };
  void *dq_in = dev(nq * 2), *dk_in = dev(nk * 2), *dv_in = dev(nk * 2), *do_in = dev(nq * 2), *o_in = dev(nq * 2);
  float* lse_in = static_cast<float*>(dev(nlse * 4));
  float* dlse_in = static_cast<float*>(dev(nlse * 4));
  void *dq = dev(nq * 2), *dk = dev(nk * 2), *dv = dev(nk * 2);
  // (Empty tensors: no copy at all; a null host pointer is not accepted even for 0 bytes.)
  auto h2d = [](void* dst, const void* src, size_t bytes) {
    if (bytes) CHECK_CUDA(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
  };
  auto d2h = [](void* dst, const void* src, size_t bytes) {
    if (bytes) CHECK_CUDA(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
  };
  h2d(dq_in, hq.data(), nq * 2);
  h2d(dk_in, hk.data(), nk * 2);
  h2d(dv_in, hv.data(), nk * 2);
  h2d(do_in, hdo.data(), nq * 2);
  h2d(o_in, ho.data(), nq * 2);
  h2d(lse_in, hlse.data(), nlse * 4);
  h2d(dlse_in, dlse.data(), nlse * 4);

  BwdProblem p{{c.b, c.sq, c.sk, c.hq, c.hkv, c.d, c.bf16 ? Dtype::kBf16 : Dtype::kF16, float(scale), c.causal},
               dq_in, dk_in, dv_in, o_in, lse_in, do_in, dlse_in, dq, dk, dv, false};
  // The variant's device arrays (sinks need none: the lse above already holds them).
  std::vector<void*> var_bufs;
  // (given: the feature is on, so an empty array of an empty sequence is still a non-null pointer.)
  auto dev_ints = [&](const std::vector<int32_t>& h, bool given) -> const int32_t* {
    if (!given) return nullptr;
    void* ptr = dev(h.size() * 4);
    h2d(ptr, h.data(), h.size() * 4);
    var_bufs.push_back(ptr);
    return static_cast<const int32_t*>(ptr);
  };
  p.variant.window_left = c.v.left;
  p.variant.window_right = c.v.right;
  p.variant.softcap = c.v.softcap;
  p.variant.q_lengths = dev_ints(vin.q_len, c.v.lengths);
  p.variant.kv_lengths = dev_ints(vin.kv_len, c.v.lengths);
  p.variant.q_segment_ids = dev_ints(vin.q_ids, c.v.segments != 0);
  p.variant.kv_segment_ids = dev_ints(vin.kv_ids, c.v.segments != 0);
  p.variant.q_segment_ranges = dev_ints(vin.q_rng, c.v.segments != 0);
  p.variant.kv_segment_ranges = dev_ints(vin.kv_rng, c.v.segments != 0);
  const size_t ws_bytes = fa4::hopper::bwd_workspace_bytes(p);
  void* ws_mem = dev(ws_bytes);
  const BwdWorkspace ws = fa4::hopper::bwd_workspace_from(ws_mem, p);

  int failures = 0;
  for (const Target* t : targets) {
    for (int det = 0; det < 2; ++det) {
      if (!g_modes[det] || !target_runs(*t, c.d, det != 0, c.v.any(), c.causal)) continue;
      std::fflush(stdout);  // everything so far is out before the launch (a hang shows where)
      p.deterministic = det != 0;
      ++*runs;
      const char* mode = det ? " det" : "    ";
      std::vector<uint16_t> gq[2], gk[2], gv[2];
      bool launched = true;
      for (int run = 0; run < 2 && launched; ++run) {
        // Poison: 0xFFFF is NaN in bf16 and fp16; the workspace too (0xFFFFFFFF is a float NaN).
        CHECK_CUDA(cudaMemset(dq, 0xFF, std::max<size_t>(nq * 2, 16)));
        CHECK_CUDA(cudaMemset(dk, 0xFF, std::max<size_t>(nk * 2, 16)));
        CHECK_CUDA(cudaMemset(dv, 0xFF, std::max<size_t>(nk * 2, 16)));
        CHECK_CUDA(cudaMemset(ws_mem, 0xFF, std::max<size_t>(ws_bytes, 16)));
        std::string err = launch_target(*t, p, ws);
        if (!err.empty()) {
          std::printf("FAIL %-16s %s%s: launch error: %s\n", t->name, describe(c).c_str(), mode, err.c_str());
          launched = false;
          break;
        }
        // A hang (a barrier or semaphore nobody completes) shows as this run timing out, named,
        // instead of a silent binary: poll the stream against --timeout seconds.
        cudaError_t e = wait_for_device(g_timeout_s);
        if (e == cudaErrorNotReady) {
          std::printf("HANG %-16s %s%s: not finished after %d s (the kernel is stuck; exiting)\n", t->name,
                      describe(c).c_str(), mode, g_timeout_s);
          std::fflush(stdout);
          std::_Exit(3);  // the device cannot be reset from here; exit without waiting on it
        }
        if (e != cudaSuccess) {
          std::printf("FAIL %-16s %s%s: kernel error %s\n", t->name, describe(c).c_str(), mode, cudaGetErrorString(e));
          std::exit(2);  // the context is gone
        }
        gq[run].resize(nq);
        gk[run].resize(nk);
        gv[run].resize(nk);
        d2h(gq[run].data(), dq, nq * 2);
        d2h(gk[run].data(), dk, nk * 2);
        d2h(gv[run].data(), dv, nk * 2);
      }
      if (!launched) {
        ++failures;
        continue;
      }
      // dK and dV come from registers of one CTA each: a second run must give the same bits (a
      // moving result is a race). dQ is summed by float atomics in hardware order: not expected to
      // repeat, except in the deterministic mode, where it must.
      const bool kv_same = gk[0] == gk[1] && gv[0] == gv[1];
      const bool q_same = gq[0] == gq[1];
      const Err eq = compare(gq[0], ref.dq, c.bf16), ek = compare(gk[0], ref.dk, c.bf16),
                ev = compare(gv[0], ref.dv, c.bf16);
      // Relative to each gradient's largest magnitude, plus an absolute floor for gradients that
      // are exactly 0 in float64 (seq 1 without dlse: dS = P (dP - delta) is pure float32 rounding
      // noise, ~1e-5). P and dS are rounded to the input dtype before their MMAs, o is rounded too
      // (delta), and the outputs once more: a numpy model of exactly that
      // (tests/gpu/cuda/bwd_layout_check.py's tiling with rounding) gives 2.2e-3 .. 4.4e-3 (bf16)
      // and 4e-4 .. 5e-4 (fp16) on 600 x 600 shapes, so these bounds leave 3-5x; a layout or
      // masking bug gives O(1e-2 .. 1).
      // Soft cap: tanh.approx (2^-11 relative) moves each score by up to c 2^-11 against the
      // float64 lse, a relative error of P of that size; twice it bounds the fp16 cases.
      const double tol = std::max(c.bf16 ? 1.5e-2 : 2.5e-3, 2.0 * c.v.softcap * 4.9e-4);
      const double floor = 1e-4;
      double ratio = 0;
      for (const Err* e : {&eq, &ek, &ev}) ratio = std::max(ratio, e->max_err / (tol * e->max_ref + floor));
      const bool pass =
          eq.nonfinite + ek.nonfinite + ev.nonfinite == 0 && ratio <= 1.0 && kv_same && (q_same || !det);
      *worst_ratio = std::max(*worst_ratio, ratio);
      failures += !pass;
      std::printf("%s %-16s %-90s%s rel err dq %.2e dk %.2e dv %.2e (tol %.0e) nonfinite %zu/%zu/%zu  dk,dv %s  dq %s\n",
                  pass ? "ok  " : "FAIL", t->name, describe(c).c_str(), mode,
                  eq.max_ref > 0 ? eq.max_err / eq.max_ref : eq.max_err,
                  ek.max_ref > 0 ? ek.max_err / ek.max_ref : ek.max_err,
                  ev.max_ref > 0 ? ev.max_err / ev.max_ref : ev.max_err, tol, eq.nonfinite, ek.nonfinite, ev.nonfinite,
                  kv_same ? "repeat" : "DIFFER ON RERUN",
                  q_same ? "repeats" : (det ? "DIFFERS ON RERUN (deterministic mode)" : "differs on rerun (atomics)"));
    }
  }
  for (void* ptr : {dq_in, dk_in, dv_in, do_in, o_in, static_cast<void*>(lse_in), static_cast<void*>(dlse_in), dq,
                    dk, dv, ws_mem})
    cudaFree(ptr);
  for (void* ptr : var_bufs) cudaFree(ptr);
  return failures;
}

// Kernel-only timing of every selected target on the FA3 grid (bf16, 16k tokens, hidden 2048);
// with_det adds each target's deterministic-mode row.
// given: the band and soft cap the rows run (--window / --softcap; lengths and sinks are not
// timed), g_bench_docs the documents per row (--bench-docs). TFLOP/s still count the dense or
// causal pairs of the whole row: compare the ms column.
static void bench(const std::vector<int>& seqs, const std::vector<const Target*>& targets,
                  const std::vector<int>& dims, bool with_det, const Variant& given) {
  std::printf("\nkernel-only backward timing (preprocess + main + postprocess), FA3 grid (bf16, 16k tokens, "
              "hidden 2048), median of 10; TFLOP/s with backward FLOPs = 2.5 x forward; window (%d, %d), soft "
              "cap %g, %d documents per row, heads %d / kv %d (0: 2048 / d)\n", given.left, given.right, given.softcap,
              g_bench_docs, g_bench_heads, g_bench_heads_kv);
  std::printf("%5s %7s %6s %6s %-18s %4s %10s %9s\n", "hd", "causal", "seq", "batch", "config", "det", "ms", "TFLOP/s");
  for (int d : dims) {
    for (int causal = 0; causal < 2; ++causal) {
      for (int s : seqs) {
        const int b = 16384 / s, h = g_bench_heads > 0 ? g_bench_heads : 2048 / d;
        const int hkv = g_bench_heads_kv > 0 ? g_bench_heads_kv : h;
        if (hkv > h || h % hkv != 0) {
          std::printf("--bench-heads-kv %d must divide the query heads (%d)\n", hkv, h);
          std::exit(2);
        }
        const size_t n = size_t(b) * s * h * d;  // k, v, dk, dv are allocated as large (hkv <= h)
        void *q, *k, *v, *o, *dout, *dq, *dk, *dv;
        float *lse, *dlse;
        for (void** ptr : {&q, &k, &v, &o, &dout, &dq, &dk, &dv}) CHECK_CUDA(cudaMalloc(ptr, n * 2));
        CHECK_CUDA(cudaMalloc(&lse, size_t(b) * h * s * 4));
        CHECK_CUDA(cudaMalloc(&dlse, size_t(b) * h * s * 4));
        std::vector<uint16_t> host(n);
        std::mt19937 rng(d * 7 + s);
        std::normal_distribution<float> nd(0.f, 1.f);
        for (auto& x : host) x = to_bits(nd(rng), true);
        for (void* ptr : {q, k, v, o, dout}) CHECK_CUDA(cudaMemcpy(ptr, host.data(), n * 2, cudaMemcpyHostToDevice));
        // lse: a plausible value (log of the key count) so P stays O(1/seq); dlse zero.
        std::vector<float> hl(size_t(b) * h * s, std::log(float(s)) + 4.f);
        CHECK_CUDA(cudaMemcpy(lse, hl.data(), hl.size() * 4, cudaMemcpyHostToDevice));
        CHECK_CUDA(cudaMemset(dlse, 0, hl.size() * 4));
        BwdProblem p{{b, s, s, h, hkv, d, Dtype::kBf16, 1.f / std::sqrt(float(d)), causal != 0},
                     q, k, v, o, lse, dout, dlse, dq, dk, dv, false};
        p.variant.window_left = given.left;
        p.variant.window_right = given.right;
        p.variant.softcap = given.softcap;
        const std::vector<void*> id_mem = set_packed_documents(&p.variant, b, s, g_bench_docs);
        void* ws_mem;
        CHECK_CUDA(cudaMalloc(&ws_mem, fa4::hopper::bwd_workspace_bytes(p)));
        const BwdWorkspace ws = fa4::hopper::bwd_workspace_from(ws_mem, p);
        cudaEvent_t e0, e1;
        cudaEventCreate(&e0);
        cudaEventCreate(&e1);
        // Warm-up (check_util.h): the library, untimed, before any row.
        warm_up([&] { return fa4::hopper::launch_bwd(p, ws, 0); });
        for (const Target* t : targets) {
          for (int det = 0; det < (with_det ? 2 : 1); ++det) {
            if (!target_runs(*t, d, det != 0, given.any() || g_bench_docs > 0, causal != 0)) continue;
            p.deterministic = det != 0;
            std::vector<float> ms;
            for (int it = 0; it < 13; ++it) {
              cudaEventRecord(e0);
              std::string err = launch_target(*t, p, ws);
              cudaEventRecord(e1);
              if (!err.empty()) {
                std::printf("launch error %s\n", err.c_str());
                std::exit(3);
              }
              CHECK_CUDA(cudaEventSynchronize(e1));
              float tm;
              cudaEventElapsedTime(&tm, e0, e1);
              if (it >= 3) ms.push_back(tm);
            }
#if FA4_BWD_PHASE_PROBE
            if (g_probe) {
              const int64_t tiles = (int64_t(s) + 127) / 128 * b * hkv;  // block_n = 128 (hd64, hd128)
              probe_report(t->name, tiles, [&] { launch_target(*t, p, ws); });
            }
#endif
            std::sort(ms.begin(), ms.end());
            const double med = ms[ms.size() / 2];
            const double flops = 2.5 * 4.0 * b * h * double(s) * s * d / (causal ? 2 : 1);
            std::printf("%5d %7s %6d %6d %-18s %4s %10.4f %9.1f\n", d, causal ? "yes" : "no", s, b, t->name,
                        det ? "yes" : "no", med, flops / med / 1e9);
            std::fflush(stdout);
          }
        }
        for (void* ptr : {q, k, v, o, dout, dq, dk, dv, static_cast<void*>(lse), static_cast<void*>(dlse), ws_mem})
          cudaFree(ptr);
        for (void* ptr : id_mem) cudaFree(ptr);
      }
    }
  }
}

static std::vector<int> int_list(const char* t) {
  std::vector<int> out;
  for (; *t; t = std::strchr(t, ',') ? std::strchr(t, ',') + 1 : t + std::strlen(t)) out.push_back(std::atoi(t));
  return out;
}

// The variant suite: small shapes, each variant alone and combined (GQA, seq_q != seq_k, ragged
// blocks, several batch entries for the lengths and ids).
static std::vector<Case> variant_cases() {
  std::vector<Case> out;
  auto add = [&](int b, int sq, int sk, int hq, int hkv, bool causal, Variant v) {
    Case c{b, sq, sk, hq, hkv, 0, true, causal, false};
    c.v = v;
    out.push_back(c);
  };
  Variant w;
  w.left = 100, w.right = 0;
  add(2, 300, 300, 2, 1, false, w);  // a causal window without `causal`
  w.left = 64, w.right = 40;
  add(1, 200, 500, 4, 2, false, w);  // two-sided, seq_q < seq_k
  w.left = 0, w.right = 0;
  add(1, 257, 257, 2, 2, false, w);  // the diagonal alone
  w.left = 200, w.right = kUnb;
  add(1, 600, 400, 2, 1, true, w);   // causal folded into a left window, seq_q > seq_k
  w.left = -30, w.right = 150;
  add(1, 300, 300, 2, 1, false, w);  // ring bounds: a band off the diagonal
  w.left = 128, w.right = 0;
  add(1, 2048, 2048, 2, 1, false, w);  // long sequence: most key x query blocks skipped
  Variant l;
  l.lengths = true;
  add(3, 300, 280, 2, 1, false, l);
  add(3, 333, 333, 4, 1, true, l);
  Variant sg;
  sg.segments = 1;
  add(2, 500, 500, 2, 1, true, sg);   // packed documents, causal inside each
  add(2, 700, 700, 2, 2, false, sg);
  add(1, 300, 450, 2, 1, false, sg);  // seq_q != seq_k, ids lined up by position fraction
  sg.segments = 2;
  add(1, 200, 200, 2, 1, false, sg);  // unsorted ids: exact, little skipping
  Variant cap;
  cap.softcap = 5.f;
  add(1, 300, 300, 2, 1, true, cap);
  add(2, 129, 257, 4, 4, false, cap);
  Variant sink;
  sink.sinks = true;
  add(1, 200, 200, 2, 1, true, sink);
  Variant all;
  all.left = 96, all.right = 16, all.lengths = true, all.segments = 1, all.softcap = 8.f, all.sinks = true;
  add(3, 400, 400, 4, 2, true, all);
  all.segments = 2;
  add(2, 300, 350, 4, 1, false, all);
  w.left = 256, w.right = 0;
  add(1, 1024, 1024, 4, 4, true, w);  // causal with a left window: the benchmark's shape, scaled down
  Variant il;
  il.segments = 3;
  add(2, 700, 700, 2, 1, true, il);  // two interleaved documents (whole chunks), causal and not
  add(1, 500, 500, 2, 2, false, il);
  // Each case stays small: the float64 reference visits b x hq x sq x sk pairs and, for the
  // visible ones, 6 d flops; at head dim 256 this bound keeps a case under ~1 s on 16 cores and
  // the whole suite (every head dim, both dtypes, every configuration and mode) well under 60 s.
  for (const Case& c : out) {
    if (double(c.b) * c.hq * c.sq * c.sk * 256 > 4.3e9) {
      std::printf("variant case b=%d sq=%d sk=%d hq=%d too large for the suite\n", c.b, c.sq, c.sk, c.hq);
      std::exit(2);
    }
  }
  return out;
}

int main(int argc, char** argv) {
  // Line-buffered even into a file or pipe: a run that hangs (or a killed binary) has printed
  // every finished line.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  bool do_bench = false, do_check = true, det_bench = false, quick = false;
  bool variants = true, variants_only = false, shapes_variant = false;
  Variant given;
  std::vector<int> seqs = {512, 1024, 2048, 4096, 8192, 16384};
  std::vector<int> only_d;
  std::vector<const Target*> targets;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--bench")) do_bench = true;
    else if (!std::strcmp(argv[i], "--deterministic-bench")) do_bench = det_bench = true;
    else if (!std::strcmp(argv[i], "--no-check")) do_check = false;
    else if (!std::strcmp(argv[i], "--probe")) {
#if FA4_BWD_PHASE_PROBE
      g_probe = true;
#else
      std::printf("--probe needs a phase-probe build (nvcc -DFA4_BWD_PHASE_PROBE=1 for every source)\n");
      return 2;
#endif
    }
    else if (!std::strcmp(argv[i], "--quick")) quick = true;  // two small bf16 shapes (compute-sanitizer)
    else if (!std::strcmp(argv[i], "--quick-bench")) seqs = {2048, 4096, 16384};
    else if (!std::strcmp(argv[i], "--hd") && i + 1 < argc) only_d.push_back(std::atoi(argv[++i]));
    // Persistent configurations: cap the grid so even small cases run many tiles per CTA.
    else if (!std::strcmp(argv[i], "--max-ctas") && i + 1 < argc) g_max_ctas = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--bench-docs") && i + 1 < argc) g_bench_docs = std::max(0, std::atoi(argv[++i]));
    else if (!std::strcmp(argv[i], "--bench-heads") && i + 1 < argc) g_bench_heads = std::max(0, std::atoi(argv[++i]));
    else if (!std::strcmp(argv[i], "--bench-heads-kv") && i + 1 < argc)
      g_bench_heads_kv = std::max(0, std::atoi(argv[++i]));
    else if (!std::strcmp(argv[i], "--lpt") && i + 1 < argc) g_lpt = std::atoi(argv[++i]) != 0 ? 1 : 0;
    else if (!std::strcmp(argv[i], "--lpt-section") && i + 1 < argc) g_lpt_section = std::max(0, std::atoi(argv[++i]));
    else if (!std::strcmp(argv[i], "--seqs") && i + 1 < argc) seqs = int_list(argv[++i]);
    else if (!std::strcmp(argv[i], "--timeout") && i + 1 < argc) g_timeout_s = std::max(1, std::atoi(argv[++i]));
    else if (!std::strcmp(argv[i], "--no-variants")) variants = false;
    else if (!std::strcmp(argv[i], "--variants-only")) variants_only = true;
    else if (!std::strcmp(argv[i], "--window") && i + 1 < argc) {
      const std::vector<int> w = int_list(argv[++i]);
      if (w.size() != 2) {
        std::printf("--window takes L,R\n");
        return 2;
      }
      given.left = std::min(w[0], kUnb), given.right = std::min(w[1], kUnb);
      shapes_variant = true;
    } else if (!std::strcmp(argv[i], "--lengths")) {
      given.lengths = shapes_variant = true;
    } else if (!std::strcmp(argv[i], "--segments") && i + 1 < argc) {
      ++i;
      given.segments = !std::strcmp(argv[i], "sorted")        ? 1
                       : !std::strcmp(argv[i], "unsorted")    ? 2
                       : !std::strcmp(argv[i], "interleaved") ? 3
                                                              : -1;
      if (given.segments < 0) {
        std::printf("--segments takes sorted, unsorted or interleaved\n");
        return 2;
      }
      shapes_variant = true;
    } else if (!std::strcmp(argv[i], "--softcap") && i + 1 < argc) {
      given.softcap = float(std::atof(argv[++i]));
      shapes_variant = true;
    } else if (!std::strcmp(argv[i], "--sinks")) {
      given.sinks = shapes_variant = true;
    }
    else if (!std::strcmp(argv[i], "--modes") && i + 1 < argc) {
      g_modes[0] = g_modes[1] = false;
      for (int m : int_list(argv[++i]))
        if (m == 0 || m == 1) g_modes[m] = true;
    } else if (!std::strcmp(argv[i], "--config") && i + 1 < argc) {
      const char* name = argv[++i];
      const Target* found = nullptr;
      for (const Target& t : kTargets)
        if (!std::strcmp(t.name, name)) found = &t;
      if (!found) {
        std::printf("unknown configuration \"%s\"; known:", name);
        for (const Target& t : kTargets) std::printf(" \"%s\"", t.name);
        std::printf("\n");
        return 2;
      }
      targets.push_back(found);
    } else {
      std::printf("unknown option %s\n", argv[i]);
      return 2;
    }
  }
  if (targets.empty())
    for (const Target& t : kTargets) targets.push_back(&t);
  const std::vector<int> dims = only_d.empty() ? std::vector<int>{64, 128, 256} : only_d;
  int device = 0, major = 0;
  CHECK_CUDA(cudaGetDevice(&device));
  CHECK_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  if (major != 9) {
    std::printf("needs a Hopper GPU (sm_90a)\n");
    return 2;
  }
  int failures = 0, total = 0;
  double worst = 0;
  if (do_check) {
    // b, sq, sk, hq, hkv: ragged lengths, seq_q != seq_k both ways (with causal, rows that see no
    // key), GQA ratios 1/2/4/8, odd batch, empty sequences, and enough query blocks that the Q/dO
    // rings wrap many times.
    const Case shapes[] = {
        {1, 1, 1, 1, 1},      {3, 17, 17, 2, 1},     {1, 127, 127, 4, 2},   {1, 200, 1000, 4, 1},
        {1, 1000, 200, 2, 2}, {2, 300, 301, 8, 8},   {1, 1000, 1000, 2, 1}, {1, 300, 300, 8, 1},
        {1, 5, 0, 2, 1},      {1, 0, 5, 2, 1},       {1, 129, 257, 2, 2},
    };
    uint64_t seed = 1;
    if (!variants_only) {
      for (int d : dims)
        for (int bf16 = 1; bf16 >= (quick ? 1 : 0); --bf16)
          for (int causal = 0; causal < 2; ++causal)
            for (Case c : shapes) {
              // --quick: a ragged GQA shape and a multi-block one (seq_q != seq_k).
              if (quick && !((c.sq == 17 && c.sk == 17) || (c.sq == 129 && c.sk == 257))) continue;
              c.d = d;
              c.bf16 = bf16;
              c.causal = causal;
              c.with_dlse = (seed % 2) == 0;
              c.v = given;  // --window / --lengths / --segments / --softcap / --sinks
              failures += run_case(c, seed++, &worst, targets, &total);
            }
    }
    // The variant suite (bf16 and, outside --quick, fp16 on every other case).
    if ((variants || variants_only) && !shapes_variant) {
      const std::vector<Case> vcases = variant_cases();
      for (int d : dims)
        for (size_t n = 0; n < vcases.size(); ++n) {
          if (quick && n % 4 != 0) continue;
          for (int bf16 = 1; bf16 >= ((quick || n % 2) ? 1 : 0); --bf16) {
            Case c = vcases[n];
            c.d = d;
            c.bf16 = bf16;
            c.with_dlse = (seed % 2) == 0;
            failures += run_case(c, seed++, &worst, targets, &total);
          }
        }
    }
    std::printf("\n%d/%d runs passed (case x configuration x mode; det = deterministic mode); worst max-error / "
                "tolerance = %.3f\n",
                total - failures, total, worst);
  }
  if (do_bench) bench(seqs, targets, dims, det_bench, given);
  return failures == 0 ? 0 : 1;
}
