// PhaseClocks: harness-only instrumentation of the forward consumers, plain and persistent
// (fwd_config.cuh: FwdTile::phase_clocks). Every consumer thread keeps 32-bit cycle sums per phase of its schedule;
// at the end each warpgroup's elected thread adds them, its whole span and its tile count to
// g_fwd_phase_clocks (one array per translation unit: the harness reads the one of the variants
// file that instantiates the instrumented variant). Off (PhaseClock<false>), every call is empty,
// so the library's kernels compile as without it.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

namespace fa4::hopper {

enum FwdPhase : int {
  kPhaseWaitQ = 0,     // q_full: the tile's Q landed
  kPhaseSched = 1,     // named barrier: waiting for this warpgroup's MMA-issue turn
  kPhaseIssue = 2,     // issuing S / PV wgmmas (includes waiting for K / V stages to be full)
  kPhaseWaitS = 3,     // wgmma wait for S = Q K^T
  kPhaseSoftmax = 4,   // mask, online softmax, O rescale, P packing, stage releases
  kPhaseWaitPv = 5,    // wgmma wait for O += P V
  kPhaseEpilogue = 6,  // normalise, stage and store O and the LSE
  kPhaseCount = 7
};

// [kPhaseCount] = the warpgroups' spans (first tile to the end), [kPhaseCount + 1] = tiles.
static __device__ unsigned long long g_fwd_phase_clocks[kPhaseCount + 2];

template <bool On>
struct PhaseClock {
  uint32_t acc[kPhaseCount] = {};
  uint32_t last = 0, first = 0, tiles = 0;
  __device__ __forceinline__ void start() { first = last = uint32_t(clock()); }
  // Charges the cycles since the previous tick to phase ph.
  __device__ __forceinline__ void tick(int ph) {
    const uint32_t now = uint32_t(clock());
    acc[ph] += now - last;
    last = now;
  }
  __device__ __forceinline__ void tile_done() { ++tiles; }
  __device__ __forceinline__ void flush(bool elected) {
    if (!elected) return;
#pragma unroll
    for (int i = 0; i < kPhaseCount; ++i) atomicAdd(&g_fwd_phase_clocks[i], static_cast<unsigned long long>(acc[i]));
    atomicAdd(&g_fwd_phase_clocks[kPhaseCount], static_cast<unsigned long long>(last - first));
    atomicAdd(&g_fwd_phase_clocks[kPhaseCount + 1], static_cast<unsigned long long>(tiles));
  }
};

template <>
struct PhaseClock<false> {
  __device__ __forceinline__ void start() {}
  __device__ __forceinline__ void tick(int) {}
  __device__ __forceinline__ void tile_done() {}
  __device__ __forceinline__ void flush(bool) {}
};

// Host: copies this translation unit's g_fwd_phase_clocks into out (kPhaseCount + 2 values) and
// clears them. Static like the array, so each variants file reads its own.
[[maybe_unused]] static std::string fwd_phase_clocks_take(unsigned long long* out) {
  constexpr size_t kBytes = (kPhaseCount + 2) * sizeof(unsigned long long);
  cudaError_t e = cudaMemcpyFromSymbol(out, g_fwd_phase_clocks, kBytes);
  const unsigned long long zero[kPhaseCount + 2] = {};
  if (e == cudaSuccess) e = cudaMemcpyToSymbol(g_fwd_phase_clocks, zero, kBytes);
  return e == cudaSuccess ? std::string() : std::string(cudaGetErrorString(e));
}

}  // namespace fa4::hopper
