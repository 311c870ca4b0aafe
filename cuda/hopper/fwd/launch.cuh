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
  using Key = std::array<int64_t, 7>;
  static std::mutex mutex;
  static std::map<Key, int64_t> cache;
  const Key key{s.seq_q, s.seq_k, s.pairs, s.kv_bytes_per_pair, s.block_m, s.block_n, s.ctas};
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

// Builds the tensor maps and launches one instantiation.
template <class T, class Cfg, bool Causal>
std::string launch_fwd_kernel(const FwdProblem& p, cudaStream_t stream, const FwdScheduleParams& params) {
  const bool bf16 = std::is_same_v<T, __nv_bfloat16>;
  CUtensorMap tq, tk, tv, to;
  std::string err;
  const int64_t seq_k_map = p.seq_k > 0 ? p.seq_k : 1;  // no key is ever loaded when seq_k == 0
  if (!(err = make_bshd_tensor_map(&tq, p.q, bf16, p.batch, p.seq_q, p.heads_q, p.head_dim, Cfg::block_m())).empty()) return err;
  if (!(err = make_bshd_tensor_map(&tk, p.k, bf16, p.batch, seq_k_map, p.heads_kv, p.head_dim, Cfg::block_n())).empty()) return err;
  if (!(err = make_bshd_tensor_map(&tv, p.v, bf16, p.batch, seq_k_map, p.heads_kv, p.head_dim, Cfg::block_n())).empty()) return err;
  if (!(err = make_bshd_tensor_map(&to, p.o, bf16, p.batch, p.seq_q, p.heads_q, p.head_dim, 64)).empty()) return err;

  FwdArgs args;
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
  dim3 grid(unsigned(m_blocks), unsigned(p.heads_q), unsigned(p.batch));
  if (Cfg::longest_first() && Causal && m_blocks * p.heads_q * p.batch <= INT_MAX) {
    args.lpt_section = int(params.section > 0 ? std::min<int64_t>(params.section, p.heads_q * p.batch) : fwd_lpt_section(p));
    grid = dim3(unsigned(m_blocks * p.heads_q * p.batch), 1, 1);
  }

  auto kernel = [] {
    if constexpr (Cfg::persistent()) {
      return fwd_kernel_persistent<T, Cfg, Causal>;
    } else {
      return fwd_kernel<T, Cfg, Causal>;
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
    // The causal order: L2-sized longest-first sections, the size scored by the host model of
    // fwd/schedule_model.h (one section over all pairs reads K/V from DRAM for every tile).
    if (Causal) {
      const FwdPersistentShape shape{p.seq_q, p.seq_k, p.heads_q * p.batch, fwd_kv_bytes_per_pair(p),
                                     Cfg::block_m(), Cfg::block_n(), int(ctas)};
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

template <template <bool> class Config>
std::string launch_fwd_config(const FwdProblem& p, cudaStream_t stream, const FwdScheduleParams& params) {
  bool nothing_to_do = false;
  if (std::string err = check_fwd_problem(p, &nothing_to_do); !err.empty() || nothing_to_do) return err;
  if (p.head_dim != Config<false>::head_dim())
    return std::string("configuration \"") + Config<false>::name() + "\" needs head_dim " +
           std::to_string(Config<false>::head_dim()) + ", got " + std::to_string(p.head_dim);
  if (p.dtype == Dtype::kBf16) {
    return p.causal ? launch_fwd_kernel<__nv_bfloat16, Config<true>, true>(p, stream, params)
                    : launch_fwd_kernel<__nv_bfloat16, Config<false>, false>(p, stream, params);
  }
  return p.causal ? launch_fwd_kernel<__half, Config<true>, true>(p, stream, params)
                  : launch_fwd_kernel<__half, Config<false>, false>(p, stream, params);
}

}  // namespace fa4::hopper
