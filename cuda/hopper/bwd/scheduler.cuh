// The backward's tile schedulers: which (key block, kv head, batch) tile a CTA works on.
//
//   BwdGridScheduler        one CTA per tile. lpt_section == 0: grid (key blocks, kv heads,
//                           batch). Else a 1-D grid in the sectioned longest-first order (below).
//                           Deterministic causal runs the key blocks last-first.
//   BwdPersistentScheduler  min(tiles, SMs) CTAs loop over tile ids: blockIdx.x first, then
//                           (*args.tile_counter)++ + gridDim.x until >= tiles; the loader thread
//                           publishes each id to the CTA's other readers through two shared slots.
//
// Sectioned longest-first order (FA3's LPT idea): the (batch, kv head) pairs hb = batch *
// heads_kv + kv_head are cut into sections of lpt_section consecutive pairs (the last may be
// shorter), sections in order, and inside a section key block n major, pair minor: every pair's
// block 0 (under a causal mask the longest: it sees every query block) first, the last-dispatched
// tiles the shortest. A section covers the pairs whose Q, dO and dq_accum rows fit the L2 share
// the heuristics chose (heuristics.h).
#pragma once
#include <cstdint>

#include "hopper/bwd/args.cuh"
#include "hopper/common/mask.cuh"
#include "hopper/ptx/mbarrier.cuh"

namespace fa4::hopper {

// The query blocks [*m_begin, *m_end) of a tile's steps: THE range, asked by the loader, the
// consumers and the dQ writer alike (and, band-only, by the deterministic ranks of bwd_dq_rank),
// so they always agree on which steps exist.
//   kDense / kCausal: from the mask policy's first query block that sees key n0 (causal: the
//     earlier ones see none of the tile's keys) to the last block of seq_q, or with a causal
//     band's left edge to the last block that sees the tile's last key (bwd_band_query_end).
//   kVariant: the query blocks whose rows see keys [n0, n0 + block_n) by band and lengths
//     (TileMask::query_blocks), narrowed to the 64-row chunks whose segment-id range meets the
//     keys' (warp-collective: every lane of the calling warp must call it with the same
//     arguments). Deterministic mode does not narrow by segment, so that the ranks stay a count
//     over the band alone. An empty range is (0, 0).
template <class Cfg>
__device__ __forceinline__ void bwd_variant_query_blocks(const TileMask<MaskKind::kVariant>& mask, bool narrow,
                                                         int n0, int* m_begin, int* m_end) {
  int lo, hi;
  mask.row_span(n0, n0 + Cfg::block_n(), &lo, &hi);
  if (narrow) mask.narrow_rows_by_segment(n0, n0 + Cfg::block_n(), &lo, &hi, int(threadIdx.x % 32));
  TileMask<MaskKind::kVariant>::blocks_of(lo, hi, Cfg::block_m(), m_begin, m_end);
}

// A causal band (bwd_band_bounded): one past the last query block that sees keys [n0, n0 + bn),
// at most m_end: the last row that sees the tile's last key is that key + band_reach. Host and
// device (the host schedule check replays it against TileMask<kVariant>).
FA4_HOST_DEVICE_INLINE int bwd_band_query_end(int seq_k, int band_reach, int n0, int m_end, int bm, int bn) {
  const int last_row = imin(n0 + bn, seq_k) - 1 + band_reach;
  return last_row < 0 ? 0 : imin(m_end, last_row / bm + 1);
}

template <class Cfg, MaskKind K>
__device__ __forceinline__ void bwd_query_blocks(const BwdArgs& args, int batch, int n0, int* m_begin, int* m_end) {
  if constexpr (K == MaskKind::kVariant) {
    const TileMask<MaskKind::kVariant> mask(args.mask, batch);
    bwd_variant_query_blocks<Cfg>(mask, !args.deterministic, n0, m_begin, m_end);
    // From lane 0, so the compiler knows the range is warp-uniform (every caller is a whole warp
    // with one tile): the consumers' step loop, its shared-memory addresses and the wgmma
    // descriptors then stay on the uniform datapath (per thread they cost hd128 ~110
    // instructions and four spills a step).
    *m_begin = __shfl_sync(0xffffffffu, *m_begin, 0);
    *m_end = __shfl_sync(0xffffffffu, *m_end, 0);
  } else {
    *m_end = (args.seq_q + Cfg::block_m() - 1) / Cfg::block_m();
    *m_begin = AttentionMask<K == MaskKind::kCausal>{args.seq_q, args.seq_k}.query_block_begin(n0, Cfg::block_m());
    if (K == MaskKind::kCausal && bwd_band_bounded<Cfg>(args)) {
      *m_end = bwd_band_query_end(args.seq_k, args.band_reach, n0, *m_end, Cfg::block_m(), Cfg::block_n());
      if (*m_end < *m_begin) *m_end = *m_begin;  // no row sees the tile: no steps
    }
  }
}

// The sectioned longest-first order: tile id -> key block and (batch, kv head) pair.
__device__ __forceinline__ void bwd_lpt_coords(const BwdArgs& args, int id, int* n_block, int* hb) {
  const int pairs = args.heads_kv * args.batch;
  const int per_section = args.lpt_section * args.n_blocks;
  const int section = id / per_section;
  const int rem = id - section * per_section;
  const int first = section * args.lpt_section;
  const int width = min(args.lpt_section, pairs - first);
  *hb = first + rem % width;
  *n_block = rem / width;
}

template <MaskKind K>
struct BwdGridScheduler {
  // The CTA's (key block, kv head, batch).
  __device__ static __forceinline__ void tile(const BwdArgs& args, int* n_block, int* kv_head, int* batch) {
    if (args.lpt_section == 0) {
      *n_block = blockIdx.x;
      *kv_head = blockIdx.y;
      *batch = blockIdx.z;
    } else {
      int hb;
      bwd_lpt_coords(args, blockIdx.x, n_block, &hb);
      *batch = hb / args.heads_kv;
      *kv_head = hb - *batch * args.heads_kv;
    }
    // Variant problems whose band makes the last key blocks the longest run them first (the
    // host sets reverse_blocks only outside deterministic mode).
    if (K == MaskKind::kVariant && args.reverse_blocks) *n_block = args.n_blocks - 1 - *n_block;
    // Deterministic causal / variant: key blocks last-first (the launch keeps grid x = key
    // block), so that every CTA one waits on (those before it in a query block's order,
    // bwd_dq_rank) was dispatched earlier.
    if (K != MaskKind::kDense && args.deterministic) *n_block = int(gridDim.x) - 1 - int(blockIdx.x);
  }
};

struct BwdPersistentScheduler {
  // Threads that read each published tile id: the two consumer warpgroups and the dQ writer warp.
  static constexpr uint32_t kReaders = kBwdConsumerThreads + 32;

  // Tile id -> (key block, kv head, batch). lpt_section == 0: key block fastest; else the
  // sectioned longest-first order, written out here rather than through bwd_lpt_coords (the call
  // reorders the persistent kernel's generated code).
  __device__ static __forceinline__ void tile_coords(const BwdArgs& args, int id, int* n_block, int* kv_head,
                                                     int* batch) {
    int hb;
    if (args.lpt_section == 0) {
      hb = id / args.n_blocks;
      *n_block = id - hb * args.n_blocks;
    } else {
      const int pairs = args.heads_kv * args.batch;
      const int per_section = args.lpt_section * args.n_blocks;
      const int section = id / per_section;
      const int rem = id - section * per_section;
      const int first = section * args.lpt_section;
      const int width = min(args.lpt_section, pairs - first);
      hb = first + rem % width;
      *n_block = rem / width;
    }
    *batch = hb / args.heads_kv;
    *kv_head = hb - *batch * args.heads_kv;
  }

  // Reader side: the id of iteration `it` (after its tile_full wait); frees the slot: every
  // reading thread arrives on tile_empty[it % 2] (count kReaders), which the loader waits for
  // before it writes the slot again for iteration it + 2.
  __device__ static __forceinline__ int read_tile_id(const int* ids, uint64_t* tile_empty, int it) {
    const int id = *reinterpret_cast<const volatile int*>(ids + (it & 1));
    mbarrier_arrive(&tile_empty[it & 1]);
    return id;
  }

  // Loader side: publishes iteration it's id (valid = false: -1, no more tiles) in slot it % 2.
  // The slot was read by every reader for iteration it - 2 (fresh-barrier parity trick for
  // it < 2). Without this wait a writer warp that lags could miss an id when tiles are 1-2 steps
  // long.
  __device__ static __forceinline__ void publish(int* ids, uint64_t* tile_full, uint64_t* tile_empty, int it,
                                                 bool valid, int id) {
    mbarrier_wait(&tile_empty[it & 1], ((it >> 1) & 1) ^ 1);
    *reinterpret_cast<volatile int*>(ids + (it & 1)) = valid ? id : -1;
    mbarrier_arrive(&tile_full[it & 1]);  // release: the id store is visible to the waiters
  }

  // The loader's next tile id (the counter lives in the call's workspace, zeroed before the main
  // kernel with the semaphores, so concurrent backward calls on two streams cannot share it).
  __device__ static __forceinline__ int next_tile(const BwdArgs& args) {
    return atomicAdd(args.tile_counter, 1) + int(gridDim.x);
  }
};

}  // namespace fa4::hopper
