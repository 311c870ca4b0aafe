// The forward's launch: tensor maps, the scheduler's grid and arguments, one kernel launch per
// call. Included by the instantiation files (fwd/hd*.cu), which instantiate launch_fwd_config for
// their head dim's named configurations.
#pragma once
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cmath>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <type_traits>

#include "hopper/common/tensor_map.h"
#include "hopper/fwd/config.cuh"
#include "hopper/fwd/kernel.cuh"
#include "hopper/fwd/launch.h"
#include "hopper/fwd/schedule_model.h"

namespace fa4::hopper {

// The checks every forward launch makes (launch.cu): an error, or empty when the kernels can run
// the problem; *nothing_to_do is set when the output is empty.
std::string check_fwd_problem(const FwdProblem& p, bool* nothing_to_do);

// K and V bytes (2-byte elements) one (head, batch) pair reads; a GQA group's heads share them.
inline int64_t fwd_kv_bytes_per_pair(const FwdProblem& p) {
  return p.seq_k * p.head_dim * 2 * 2 / (p.heads_q / p.heads_kv);
}

// Longest-first sections of the one-tile kernel's linear grid: (head, batch) pairs whose K and V fill about
// 32 MB of the 50 MB L2, at least one pair.
inline int64_t fwd_lpt_section(const FwdProblem& p) {
  const int64_t pairs = p.heads_q * p.batch;
  return std::min<int64_t>(pairs, std::max<int64_t>(1, (int64_t(32) << 20) / std::max<int64_t>(1, fwd_kv_bytes_per_pair(p))));
}

// fwd_persistent_section, remembered per shape: scoring costs up to tens of ms of host time, and a
// training step calls the same shapes again and again.
inline int64_t cached_persistent_section(const FwdPersistentShape& s) {
  using Key = std::array<int64_t, 10>;
  static std::mutex mutex;
  static std::map<Key, int64_t> cache;
  const Key key{s.seq_q, s.seq_k, s.pairs, s.kv_bytes_per_pair, s.block_m, s.block_n, s.ctas,
                s.window_left, s.window_right, s.m_ascending};
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = cache.find(key);
    if (it != cache.end()) return it->second;
  }
  const int64_t section = fwd_persistent_section(s);
  std::lock_guard<std::mutex> lock(mutex);
  if (cache.size() >= 4096) cache.clear();  // bounded: shapes beyond that are rescored
  cache.emplace(key, section);
  return section;
}

// The soft cap's bounded softmax (ScoreCap::kBounded, fwd/softmax.cuh) fixes each row's offset at an
// integer k: p = 2^(t C - k), C = c log2 e, for t = tanh(.) in [-1, 1]. k = ceil(C - kBoundedTopLog2)
// puts the largest p in (2^31, 2^32] (sums of 2^31 keys and |v| up to 2^64 stay finite in float), so
// the smallest is above 2^(31 - 2C), which must stay a normal float: at the largest cap, 50, it is
// 2^-113.3. P, packed to the input dtype for the PV product, must keep that range: bf16 does
// (float's exponent), fp16 (smallest normal 2^-14, largest 2^16) does not, so fp16 keeps the online
// softmax. Caps below kBoundedCapMin keep the online softmax too.
constexpr float kBoundedTopLog2 = 32.f;
constexpr float kBoundedCapMax = 50.f;
constexpr float kBoundedCapMin = 1.f / 1024.f;
inline bool fwd_bounded_cap(const ProblemShape& p) {
  return p.dtype == Dtype::kBf16 && p.variant.softcap >= kBoundedCapMin && p.variant.softcap <= kBoundedCapMax;
}
// cap_log2: C = c log2 e, the capped kernels' scale_log2.
inline float fwd_bounded_bias(float cap_log2) { return std::ceil(cap_log2 - kBoundedTopLog2); }

// The kernel a problem runs: its mask's (problem.h, mask_kind), except that a soft cap takes the
// kVariant kernel (its mask degenerates to the dense or causal one when the problem has no band,
// lengths or ids). The causal kernel built with the bounded softmax measured 2.7% slower than the
// variant kernel at soft cap 30 (docs/hopper-kernels.md, Part B), so it is not built. Sinks are
// read in every kernel's epilogue.
inline MaskKind fwd_kernel_kind(const ProblemShape& p) {
  return p.variant.softcap > 0.f ? MaskKind::kVariant : mask_kind(p);
}

// Whether the band's visible key blocks fall with the m block (rows see fewer keys further down:
// a left bound without a right one), so the longest-first orders run the m blocks upwards. The
// host knows the band only (lengths and ids are device data).
inline bool fwd_band_ascending(const ProblemShape& p, int block_m, int block_n) {
  MaskArgs a = make_mask_args(p);
  a.q_lengths = a.kv_lengths = a.q_ids = a.kv_ids = a.q_ranges = a.kv_ranges = nullptr;
  const TileMask<MaskKind::kVariant> mask(a, 0);
  const int m_blocks = int((p.seq_q + block_m - 1) / block_m);
  auto blocks = [&](int m) {
    int b, e;
    mask.key_blocks(m * block_m, m * block_m + block_m, block_n, &b, &e);
    return e - b;
  };
  return m_blocks > 1 && blocks(0) > blocks(m_blocks - 1);
}

// Builds the tensor maps and launches one instantiation.
template <class T, class Cfg, MaskKind M, ScoreCap Cap>
std::string launch_fwd_kernel(const FwdProblem& p, cudaStream_t stream, const FwdScheduleParams& params) {
  constexpr bool kOrdered = M != MaskKind::kDense;
  const bool bf16 = std::is_same_v<T, __nv_bfloat16>;
  CUtensorMap tq, tk, tv, to;
  std::string err;
  const int64_t seq_k_map = p.seq_k > 0 ? p.seq_k : 1;  // no key is ever loaded when seq_k == 0
  if (!(err = make_bshd_tensor_map(&tq, p.q, bf16, p.batch, p.seq_q, p.heads_q, p.head_dim, Cfg::block_m())).empty()) return err;
  if (!(err = make_bshd_tensor_map(&tk, p.k, bf16, p.batch, seq_k_map, p.heads_kv, p.head_dim, Cfg::block_n())).empty()) return err;
  if (!(err = make_bshd_tensor_map(&tv, p.v, bf16, p.batch, seq_k_map, p.heads_kv, p.head_dim, Cfg::block_n())).empty()) return err;
  if (!(err = make_bshd_tensor_map(&to, p.o, bf16, p.batch, p.seq_q, p.heads_q, p.head_dim, 64)).empty()) return err;

  FwdArgs args{};
  args.lse = p.lse;
  args.seq_q = int(p.seq_q);
  args.seq_k = int(p.seq_k);
  args.heads_q = int(p.heads_q);
  args.group = int(p.heads_q / p.heads_kv);
  args.softmax_scale = p.softmax_scale;
  args.scale_log2 = p.softmax_scale * 1.4426950408889634f;
  const int64_t m_blocks = (p.seq_q + Cfg::block_m() - 1) / Cfg::block_m();
  args.m_blocks = int(m_blocks);
  args.batch = int(p.batch);
  args.lpt_section = 0;
  args.mask = make_mask_args(p);
  args.sinks = p.variant.sinks;
  args.m_ascending = M == MaskKind::kVariant && fwd_band_ascending(p, Cfg::block_m(), Cfg::block_n());
  if constexpr (Cap != ScoreCap::kNone) {
    // Scores become c tanh(softmax_scale q.k / c): the kernel takes tanh(q.k * softmax_scale / c)
    // and runs the softmax and the LSE with c as the scale.
    const float c = p.variant.softcap;
    args.softcap_scale = p.softmax_scale / c;
    args.softmax_scale = c;
    args.scale_log2 = c * 1.4426950408889634f;
    args.bounded_bias = fwd_bounded_bias(args.scale_log2);
  }
  dim3 grid(unsigned(m_blocks), unsigned(p.heads_q), unsigned(p.batch));
  if (Cfg::longest_first() && kOrdered && m_blocks * p.heads_q * p.batch <= INT_MAX) {
    args.lpt_section = int(params.section > 0 ? std::min<int64_t>(params.section, p.heads_q * p.batch) : fwd_lpt_section(p));
    grid = dim3(unsigned(m_blocks * p.heads_q * p.batch), 1, 1);
  }

  auto kernel = [] {
    if constexpr (Cfg::persistent()) {
      return fwd_kernel_persistent<T, Cfg, M, Cap>;
    } else {
      return fwd_kernel<T, Cfg, M, Cap>;
    }
  }();
  if constexpr (Cfg::persistent()) {
    const int64_t tiles = m_blocks * p.heads_q * p.batch;
    if (tiles > INT_MAX) return "too many query tiles (" + std::to_string(tiles) + ") for the persistent kernel";
    int dev = 0, sms = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    if (e != cudaSuccess) return std::string("device query: ") + cudaGetErrorString(e);
    int64_t ctas = std::min<int64_t>(tiles, sms);
    if (params.max_ctas > 0) ctas = std::min<int64_t>(ctas, params.max_ctas);
    grid = dim3(unsigned(ctas), 1, 1);
    // The masked order: L2-sized longest-first sections, the size scored by the host model of
    // fwd/schedule_model.h over the band's key blocks per tile (one section over all pairs reads
    // K/V from DRAM for every tile).
    if (kOrdered) {
      FwdPersistentShape shape{p.seq_q, p.seq_k, p.heads_q * p.batch, fwd_kv_bytes_per_pair(p),
                               Cfg::block_m(), Cfg::block_n(), int(ctas)};
      if (M == MaskKind::kVariant) {
        shape.window_left = args.mask.window_left;
        shape.window_right = args.mask.window_right;
        shape.m_ascending = args.m_ascending != 0;
      }
      args.lpt_section = int(params.section > 0 ? std::min<int64_t>(params.section, shape.pairs)
                                               : cached_persistent_section(shape));
    }
  }
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::smem_bytes());
  if (e != cudaSuccess) return std::string("cudaFuncSetAttribute: ") + cudaGetErrorString(e);
  kernel<<<grid, Cfg::threads(), Cfg::smem_bytes(), stream>>>(tq, tk, tv, to, args);
  e = cudaGetLastError();
  if (e != cudaSuccess) return std::string("forward kernel launch failed: ") + cudaGetErrorString(e);
  return {};
}

// One dtype: the kernel of the problem's kind (fwd_kernel_kind) and score modifier.
template <class T, template <MaskKind> class Config>
std::string launch_fwd_kind(const FwdProblem& p, cudaStream_t stream, const FwdScheduleParams& params) {
  constexpr ScoreCap kNone = ScoreCap::kNone;
  switch (fwd_kernel_kind(p)) {
    case MaskKind::kDense:
      return launch_fwd_kernel<T, Config<MaskKind::kDense>, MaskKind::kDense, kNone>(p, stream, params);
    case MaskKind::kCausal:
      return launch_fwd_kernel<T, Config<MaskKind::kCausal>, MaskKind::kCausal, kNone>(p, stream, params);
    default:
      if constexpr (std::is_same_v<T, __nv_bfloat16>) {
        if (fwd_bounded_cap(p))
          return launch_fwd_kernel<T, Config<MaskKind::kVariant>, MaskKind::kVariant, ScoreCap::kBounded>(p, stream,
                                                                                                       params);
      }
      if (p.variant.softcap > 0.f)
        return launch_fwd_kernel<T, Config<MaskKind::kVariant>, MaskKind::kVariant, ScoreCap::kOnline>(p, stream,
                                                                                                      params);
      return launch_fwd_kernel<T, Config<MaskKind::kVariant>, MaskKind::kVariant, kNone>(p, stream, params);
  }
}

template <template <MaskKind> class Config>
std::string launch_fwd_config(const FwdProblem& p, cudaStream_t stream, const FwdScheduleParams& params) {
  bool nothing_to_do = false;
  if (std::string err = check_fwd_problem(p, &nothing_to_do); !err.empty() || nothing_to_do) return err;
  using Dense = Config<MaskKind::kDense>;
  if (p.head_dim != Dense::head_dim())
    return std::string("configuration \"") + Dense::name() + "\" needs head_dim " +
           std::to_string(Dense::head_dim()) + ", got " + std::to_string(p.head_dim);
  if (p.dtype == Dtype::kBf16) return launch_fwd_kind<__nv_bfloat16, Config>(p, stream, params);
  return launch_fwd_kind<__half, Config>(p, stream, params);
}

}  // namespace fa4::hopper
