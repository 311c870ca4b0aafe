// launch_bwd_config<Cfg> (declared in launch.h): one named configuration's preprocess, main kernel
// and postprocess on one stream. Included by the instantiation files bwd/hd64.cu, hd128.cu and
// hd256.cu only.
#pragma once
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <string>
#include <type_traits>

#include "hopper/bwd/args.cuh"
#include "hopper/bwd/config.cuh"
#include "hopper/bwd/heuristics.h"
#include "hopper/bwd/kernel.cuh"
#include "hopper/bwd/kernel_kv80.cuh"
#include "hopper/bwd/launch.h"
#include "hopper/bwd/prepost.cuh"
#include "hopper/common/dependent_launch.h"
#include "hopper/common/mask.cuh"
#include "hopper/common/tensor_map.h"

namespace fa4::hopper {

// K: the mask kind the kernels are built for (bwd_mask_kind: kCausal for plain causal attention
// and for a causal band at hd128, kVariant for every other problem with a window, lengths,
// segment ids or a soft cap); SoftCap: the score modifier.
template <class T, class Cfg, MaskKind K, bool SoftCap>
std::string launch_bwd_kernels(const BwdProblem& p, const BwdWorkspace& ws, cudaStream_t stream,
                               const BwdSchedule& schedule) {
  constexpr int D = Cfg::head_dim();
  const bool bf16 = std::is_same_v<T, __nv_bfloat16>;
  const int64_t pad = bwd_seq_q_pad(p.seq_q, p.head_dim);
  cudaError_t e;
  auto fail = [](const char* what, cudaError_t err) {
    return std::string("backward ") + what + " failed: " + cudaGetErrorString(err);
  };
  // The main kernel's tiles: key blocks x (batch, kv head) pairs.
  const int64_t n_blocks = (p.seq_k + Cfg::block_n() - 1) / Cfg::block_n();
  const int64_t pairs = p.heads_kv * p.batch;
  if (Cfg::persistent() && p.deterministic) return "backward: the persistent kernel has no deterministic mode";
  if (Cfg::persistent() && n_blocks * pairs > INT32_MAX) return "backward: too many tiles for the persistent kernel";

  // The preprocess zeroes dq_accum, the dq semaphores and the tile counter (workspace.h) itself.
  constexpr int kPreRows = 256 / (D / 8);
  bwd_preprocess<T, D><<<dim3(unsigned(pad / kPreRows), unsigned(p.heads_q), unsigned(p.batch)), 256, 0, stream>>>(
      static_cast<const T*>(p.o), static_cast<const T*>(p.d_o), p.lse, p.dlse, ws.lse2, ws.delta, ws.dq_accum,
      ws.dq_sem, int(p.seq_q), int(pad), int(p.heads_q));
  if ((e = cudaGetLastError()) != cudaSuccess) return fail("preprocess launch", e);

  if (p.seq_k > 0) {
    CUtensorMap tq, tk, tv, tdo;
    std::string err;
    if (!(err = make_bshd_tensor_map(&tq, p.q, bf16, p.batch, p.seq_q, p.heads_q, D, Cfg::block_m())).empty()) return err;
    if (!(err = make_bshd_tensor_map(&tk, p.k, bf16, p.batch, p.seq_k, p.heads_kv, D, Cfg::block_n())).empty()) return err;
    if (!(err = make_bshd_tensor_map(&tv, p.v, bf16, p.batch, p.seq_k, p.heads_kv, D, Cfg::block_n())).empty()) return err;
    if (!(err = make_bshd_tensor_map(&tdo, p.d_o, bf16, p.batch, p.seq_q, p.heads_q, D, Cfg::block_m())).empty()) return err;

    BwdArgs args;
    args.dq_accum = ws.dq_accum;
    args.dq_sem = ws.dq_sem;
    args.tile_counter = ws.tile_counter;
    args.lse2 = ws.lse2;
    args.delta = ws.delta;
    args.dk = p.dk;
    args.dv = p.dv;
    args.seq_q = int(p.seq_q);
    args.seq_k = int(p.seq_k);
    args.seq_q_pad = int(pad);
    args.heads_q = int(p.heads_q);
    args.heads_kv = int(p.heads_kv);
    args.group = int(p.heads_q / p.heads_kv);
    args.softmax_scale = p.softmax_scale;
    args.scale_log2 = p.softmax_scale * 1.4426950408889634f;
    args.deterministic = p.deterministic;
    args.lpt_section = 0;
    args.n_blocks = int(n_blocks);
    args.batch = int(p.batch);
    args.mask = make_mask_args(p);
    args.softcap_scale = SoftCap ? p.softmax_scale / p.variant.softcap : 0.f;
    args.softcap_log2 = SoftCap ? p.variant.softcap * 1.4426950408889634f : 0.f;
    args.reverse_blocks = K == MaskKind::kVariant && schedule.reverse_blocks && !p.deterministic;
    args.band_reach = K == MaskKind::kCausal ? bwd_band_reach(p) : int(p.seq_q);
#if FA4_BWD_PHASE_PROBE
    args.probe = Cfg::persistent() || Cfg::kv80() ? nullptr : bwd_phase_probe(&args.probe_ctas);
#endif

    if constexpr (Cfg::persistent()) {
      static_assert(K != MaskKind::kVariant && !SoftCap, "the persistent kernel runs dense and causal problems");
      args.lpt_section = schedule.lpt_section;
      static int sm_count = 0;
      if (sm_count == 0) {
        int dev = 0;
        if ((e = cudaGetDevice(&dev)) != cudaSuccess) return fail("cudaGetDevice", e);
        if ((e = cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, dev)) != cudaSuccess)
          return fail("cudaDeviceGetAttribute", e);
      }
      auto kernel = bwd_kernel_persistent<T, Cfg, K>;
      e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::smem_bytes());
      if (e != cudaSuccess) return fail("cudaFuncSetAttribute", e);
      int64_t ctas = std::min<int64_t>(n_blocks * pairs, sm_count);
      if (schedule.max_ctas > 0) ctas = std::min<int64_t>(ctas, schedule.max_ctas);
      e = launch_dependent(kernel, dim3(unsigned(ctas)), dim3(Cfg::threads()), Cfg::smem_bytes(), stream, tq, tk, tv,
                           tdo, args);
    } else {
      // Key blocks in index order: under a causal mask block 0 sees the most queries, so the
      // longest CTAs start first. Deterministic mode relies on the dispatch order (grid x, the
      // fastest-varying): a CTA waits only on CTAs of lower blockIdx.x, dispatched before it
      // (causal deterministic maps blockIdx.x to key blocks last-first: BwdGridScheduler), so it
      // keeps this grid.
      dim3 grid(unsigned(n_blocks), unsigned(p.heads_kv), unsigned(p.batch));
      if (schedule.lpt_section > 0 && !p.deterministic && n_blocks * pairs <= INT32_MAX) {
        args.lpt_section = schedule.lpt_section;
        grid = dim3(unsigned(n_blocks * pairs), 1, 1);
      }
      auto kernel = [] {
        if constexpr (Cfg::kv80()) {
          return bwd_kernel_kv80<T, Cfg, K, SoftCap>;
        } else {
          return bwd_kernel<T, Cfg, K, SoftCap>;
        }
      }();
      e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::smem_bytes());
      if (e != cudaSuccess) return fail("cudaFuncSetAttribute", e);
      e = launch_dependent(kernel, grid, dim3(Cfg::threads()), Cfg::smem_bytes(), stream, tq, tk, tv, tdo, args);
    }
    if (e != cudaSuccess) return fail("main kernel launch", e);
  }

  const unsigned blocks_x = unsigned((p.seq_q * (D / 8) + 255) / 256);
  e = launch_dependent(bwd_postprocess<T, D, Cfg>, dim3(blocks_x, unsigned(p.heads_q), unsigned(p.batch)), dim3(256),
                       0, stream, static_cast<const float*>(ws.dq_accum), static_cast<T*>(p.dq), p.softmax_scale,
                       int(p.seq_q), int(pad), int(p.heads_q));
  if (e != cudaSuccess) return fail("postprocess launch", e);
  return {};
}

// The instantiation set per dtype: (kDense | kCausal | kVariant) without the soft cap, kVariant with
// it, and (hd64 / hd128 grid configurations) kCausal with it for plain causal attention with a cap.
// The persistent configuration is built for plain dense and causal attention only, the 80-row
// one (Cfg::dense_only) for dense attention without a mask only.
template <class T, class Cfg>
std::string launch_bwd_kind(const BwdProblem& p, const BwdWorkspace& ws, cudaStream_t stream,
                            const BwdSchedule& schedule) {
  if constexpr (Cfg::dense_only()) {
    if (bwd_mask_kind(p) != MaskKind::kDense) {  // a soft cap is kVariant too
      return std::string("backward: the ") + Cfg::name() +
             " configuration runs dense problems without a mask only (causal, a window, lengths, segment ids or a "
             "soft cap run the 64-row configurations)";
    }
    return launch_bwd_kernels<T, Cfg, MaskKind::kDense, false>(p, ws, stream, schedule);
  } else {
    if (Cfg::persistent() && !bwd_is_plain(p)) {
      return std::string("backward: the ") + Cfg::name() +
             " configuration runs plain dense and causal problems only (a window, lengths, segment ids or a soft "
             "cap run the grid configurations)";
    }
    // A configuration without the band threshold (Cfg::causal_bands) runs a causal band as kVariant
    // (only a named configuration of another head dim's choice can meet one here).
    const MaskKind kind = !Cfg::causal_bands() && bwd_causal_band(p) ? MaskKind::kVariant : bwd_mask_kind(p);
    const bool softcap = p.variant.softcap > 0.f;
    if (kind == MaskKind::kVariant) {
      if constexpr (Cfg::persistent()) {
        return "backward: unreachable";  // rejected above
      } else {
        return softcap ? launch_bwd_kernels<T, Cfg, MaskKind::kVariant, true>(p, ws, stream, schedule)
                       : launch_bwd_kernels<T, Cfg, MaskKind::kVariant, false>(p, ws, stream, schedule);
      }
    }
    if (kind == MaskKind::kCausal && softcap) {
      if constexpr (!Cfg::persistent() && !Cfg::kv80()) {
        return launch_bwd_kernels<T, Cfg, MaskKind::kCausal, true>(p, ws, stream, schedule);
      } else {
        return "backward: unreachable";  // the persistent kernel rejects a cap above; hd256 runs it as kVariant
      }
    }
    return kind == MaskKind::kCausal ? launch_bwd_kernels<T, Cfg, MaskKind::kCausal, false>(p, ws, stream, schedule)
                                     : launch_bwd_kernels<T, Cfg, MaskKind::kDense, false>(p, ws, stream, schedule);
  }
}

template <class Cfg>
std::string launch_bwd_config(const BwdProblem& p, const BwdWorkspace& ws, cudaStream_t stream,
                              const BwdSchedule& schedule) {
  bool done = false;
  std::string err = bwd_check_launch(p, ws, stream, Cfg::head_dim(), &done);
  if (!err.empty() || done) return err;
  if (p.dtype == Dtype::kBf16) return launch_bwd_kind<__nv_bfloat16, Cfg>(p, ws, stream, schedule);
  return launch_bwd_kind<__half, Cfg>(p, ws, stream, schedule);
}

}  // namespace fa4::hopper
