// The backward main kernels' parameters and named-barrier ids (device code; the host fills BwdArgs
// in launch_config.cuh).
#pragma once
#include <cstdint>

#include "hopper/common/mask.cuh"

// FA4_BWD_PHASE_PROBE=1: a diagnostic build of the hd64 / hd128 grid kernel that records when
// each CTA reaches each phase (bwd/probe.cuh; the harness's --probe). Off in every shipped build,
// where it changes nothing (SASS identical).
#ifndef FA4_BWD_PHASE_PROBE
#define FA4_BWD_PHASE_PROBE 0
#endif

namespace fa4::hopper {

struct BwdArgs {
  float* dq_accum;     // [batch, heads_q, seq_q_pad, head_dim], zeroed by the preprocess
  int* dq_sem;         // [batch, heads_q, seq_q_pad / 64], zeroed before the preprocess (deterministic mode)
  const float* lse2;   // [batch, heads_q, seq_q_pad]: lse * log2(e); +inf where P must be 0
  const float* delta;  // [batch, heads_q, seq_q_pad]: rowsum(dO * O) - dlse; 0 in the padding
  void* dk;            // [batch, seq_k, heads_kv, head_dim], q's dtype
  void* dv;
  int seq_q, seq_k, seq_q_pad, heads_q, heads_kv;
  int group;           // heads_q / heads_kv
  float scale_log2;    // softmax_scale * log2(e)
  float softmax_scale;
  bool deterministic;  // order the dQ adds of each query block by key block (bitwise repeatable dq)
  // The scheduler's parameters (scheduler.cuh): lpt_section > 0 = tiles in the sectioned
  // longest-first order, lpt_section (batch, kv head) pairs per section; n_blocks key blocks.
  int lpt_section;
  int n_blocks;
  int batch;
  int* tile_counter;   // the persistent kernel's tile counter (workspace, zeroed with dq_sem)
  // The variant (kVariant kernels only; appended so that the dense / causal kernels' parameter
  // offsets stay as they were). mask: band (causal folded in), lengths, segment ids and ranges.
  MaskArgs mask;
  // Soft cap c > 0 (the soft-cap kernels): u = softmax_scale * q.k / c = S * softcap_scale, the
  // score c tanh(u), its log2-domain factor softcap_log2 = c * log2(e).
  float softcap_scale;
  float softcap_log2;
  // kVariant grid kernels, not deterministic: key blocks last-first (the band's longest key
  // blocks are the last ones; heuristics.h).
  bool reverse_blocks;
  // kCausal kernels: the last query row that sees key j is j + band_reach (a causal band's left
  // edge, bwd_band_reach in heuristics.h); >= seq_q for plain causal, where it hides nothing and
  // no band arithmetic runs (bwd_band_bounded).
  int band_reach;
#if FA4_BWD_PHASE_PROBE
  // The phase probe's buffer (bwd/probe.cuh): probe_ctas x kBwdProbeEvents globaltimer readings,
  // null when not probing. Only in a probe build (appended: no other offset moves).
  long long* probe;
  long long probe_ctas;
#endif
};

// Whether a kCausal problem of configuration Cfg has a left edge (a causal band): only then is
// band_reach added to a row or key index (the host bounds such problems' sequences so that stays
// in int). Only in configurations built for bands (Cfg::causal_bands): the others' kernels carry
// no band code, and the launch never hands them a band.
template <class Cfg>
FA4_HOST_DEVICE_INLINE bool bwd_band_bounded(const BwdArgs& a) {
  return Cfg::causal_bands() && a.band_reach < a.seq_q;
}

// Named barrier ids (0 is __syncthreads): both consumer warpgroups, once per step, after dS^T
// (and at hd256 P^T) is in shared memory.
constexpr uint32_t kBwdBarPds = 1;
constexpr uint32_t kBwdConsumerThreads = 256;
// Deterministic mode with the consumers' own dQ adds (hd256): both consumer warpgroups, twice per
// step, around the adds (dq_tile_wait, dq_tile_signal).
constexpr uint32_t kBwdBarDq = 4;
// hd64 / hd128: each consumer warpgroup's piece of the shared dQ tile has its own full (the
// warpgroup arrives, the writer warp syncs) and empty (the writer arrives, the warpgroup syncs)
// barrier, ids kBwdBarDqFull + wg and kBwdBarDqEmpty + wg, counting that warpgroup and the writer
// warp: the warpgroups meet once a step (kBwdBarPds), not again around dQ.
constexpr uint32_t kBwdBarDqFull = 2;   // 2, 3
constexpr uint32_t kBwdBarDqEmpty = 5;  // 5, 6
constexpr uint32_t kBwdDqBarrierThreads = 128 + 32;

// Racecheck diagnostics (docs/hopper-kernels.md, "The lse / delta racecheck report"); both off in
// every shipped build, where they change nothing.
// FA4_BWD_RELEASE_EVERY_THREAD=1: every consumer thread arrives on a Q / dO stage's empty barrier
// (count 2 x 128) instead of one elected thread per warpgroup after the P / dS named barrier, so
// each thread's own lse / delta reads precede its own release in program order (a tool that
// does not chain bar.sync -> mbarrier.arrive -> try_wait sees the order too).
// FA4_BWD_VEC_COPY_FIRST=1: the producer issues a step's TMA boxes and vector bulk copy before
// its arrive.expect_tx on the full barrier (the phase cannot complete before that arrival, the
// tx-count may dip below zero meanwhile), so the copies precede the releasing arrive in program
// order.
#ifndef FA4_BWD_RELEASE_EVERY_THREAD
#define FA4_BWD_RELEASE_EVERY_THREAD 0
#endif
#ifndef FA4_BWD_VEC_COPY_FIRST
#define FA4_BWD_VEC_COPY_FIRST 0
#endif
constexpr bool kBwdReleaseEveryThread = FA4_BWD_RELEASE_EVERY_THREAD != 0;
constexpr bool kBwdVecCopyFirst = FA4_BWD_VEC_COPY_FIRST != 0;
// Arrivals per phase of a Q / dO ring stage's empty barrier, per consumer warpgroup.
constexpr uint32_t kBwdReleasesPerWarpgroup = kBwdReleaseEveryThread ? 128 : 1;

}  // namespace fa4::hopper
