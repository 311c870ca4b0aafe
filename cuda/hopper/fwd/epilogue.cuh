// The forward epilogue: normalised O through a Q-shaped shared tile and one TMA store per
// 64-column chunk (rows past seq_q are clipped by TMA), and the LSE of each valid row.
#pragma once
#include <cuda.h>

#include <cstdint>

#include "hopper/fwd/mainloop.cuh"
#include "hopper/fwd/scheduler.cuh"
#include "hopper/ptx/barrier.cuh"
#include "hopper/ptx/tma.cuh"

namespace fa4::hopper {

// Epilogue: this thread's normalised O (o * o_scale per row) into rows [tile_row0, +8) of a Q-shaped
// shared tile (64-column chunks of chunk_bytes_q, 128-byte rows, 128B swizzle: the 16-byte unit
// index within a row XORed with row % 8), the layout the TMA store of O reads.
// ZeroEmpty: a row whose o_scale is 0 (no visible key, or padding) is written as 0 by selection,
// whatever its accumulator holds (P = 0 times a non-finite V of an invisible key).
template <class T, class Cfg, bool ZeroEmpty = false>
__device__ __forceinline__ void stage_o_tile(uint8_t* tile, const float (&o)[Cfg::head_dim() / 2],
                                             const float (&o_scale)[2], int tile_row0, int lane) {
#pragma unroll
  for (int j = 0; j < Cfg::head_dim() / 8; ++j) {
    const int col = 8 * j + 2 * (lane & 3);
    const int chunk = col / 64;
    const int cc = col % 64;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int r = tile_row0 + 8 * i;
      const uint32_t off = chunk * Cfg::chunk_bytes_q() + r * 128 + (((cc / 8) ^ (r % 8)) * 16) + (cc % 8) * 2;
      float lo = o[4 * j + 2 * i] * o_scale[i], hi = o[4 * j + 2 * i + 1] * o_scale[i];
      if (ZeroEmpty && o_scale[i] == 0.f) lo = hi = 0.f;
      *reinterpret_cast<uint32_t*>(tile + off) = pack2<T>(lo, hi);
    }
  }
}

// Consumer warpgroup c's rows of O into sO (its rows of a Q-shaped tile) and out by TMA. The
// caller makes sure nothing still reads those rows of sO (the one-tile kernel: its last wgmma
// retired; the persistent kernel: the previous tile's store has read them).
template <class T, class Cfg, bool ZeroEmpty = false>
__device__ __forceinline__ void store_o(uint8_t* sO, const CUtensorMap* tm_o, const float (&o)[Cfg::head_dim() / 2],
                                        const float (&o_scale)[2], int c, int row_in_wg, int lane, bool elected,
                                        int m0, int head, int batch, int seq_q) {
  stage_o_tile<T, Cfg, ZeroEmpty>(sO, o, o_scale, c * 64 + row_in_wg, lane);
  fence_proxy_async_smem();
  named_barrier_sync(kBarEpilogue + c, 128);
  if (elected && m0 + c * 64 < seq_q) {
#pragma unroll
    for (int chunk = 0; chunk < Cfg::chunks(); ++chunk) {
      tma_store_4d(tm_o, sO + chunk * Cfg::chunk_bytes_q() + c * 64 * 128, chunk * 64, m0 + c * 64, head, batch);
    }
    tma_store_commit();
  }
}

// The natural-log LSE of this thread's two rows (one lane per quad writes).
__device__ __forceinline__ void store_lse(const FwdArgs& args, const float (&lse)[2], int row0, int lane, int head,
                                          int batch) {
  if ((lane & 3) == 0) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int row = row0 + 8 * i;
      if (row < args.seq_q) args.lse[(int64_t(batch) * args.heads_q + head) * args.seq_q + row] = lse[i];
    }
  }
}

}  // namespace fa4::hopper
