// The backward's per-tile view of a variant mask (kVariant kernels): which of a key block's steps
// need the per-element mask, decided each step from three numbers instead of the whole TileMask,
// kept with the rest of the tile's mask facts in a per-warp shared-memory copy (the consumers run
// at the edge of their register budget; the element test of a masked step rebuilds the TileMask
// from that copy), and the producer warpgroup's register share.
#pragma once
#include <climits>
#include <cstdint>

#include "hopper/bwd/args.cuh"
#include "hopper/common/mask.cuh"
#include "hopper/common/pipeline.cuh"

namespace fa4::hopper {

// Key block [c0, c1) of one batch entry. A query block of rows [m0, r1) (r1 = min(m0 + block_m,
// seq_q)) sees every key of the block by band and lengths iff m0 >= full_lo and r1 <= full_hi
// (TileMask::needs_mask's band and length tests solved for the rows: the band's row bounds are
// monotone in the key); with segment ids, also iff every 64-row chunk of the rows holds the one id
// `seg_id` that every key chunk of the block holds (a block whose keys hold several ids always
// needs the mask: full_lo = INT_MAX).
struct BwdVariantTile {
  int full_lo, full_hi;
  int seg_id;
  bool seg;
  bool keys_uniform;  // seg: every 64-key chunk of the block holds seg_id alone

  BwdVariantTile() = default;
  __device__ __forceinline__ BwdVariantTile(const TileMask<MaskKind::kVariant>& mask, int c0, int c1) {
    full_lo = c1 <= mask.kv_len ? mask.row_lo(c1 - 1) : INT_MAX;
    full_hi = mask.row_hi(c0);
    seg = mask.q_ids != nullptr;
    seg_id = 0;
    keys_uniform = false;
    if (seg) {
      seg_id = mask.kv_ranges[2 * (c0 / kSegmentChunk)];
      keys_uniform = true;
      // Chunks past kv_len (or past seq_k: the last block may overhang) are never read.
      const int c_end = min(c1, mask.kv_len);
      for (int c = c0 / kSegmentChunk; c <= (c_end - 1) / kSegmentChunk; ++c)
        if (mask.kv_ranges[2 * c] != seg_id || mask.kv_ranges[2 * c + 1] != seg_id) keys_uniform = false;
      if (!keys_uniform) full_lo = INT_MAX;
    }
  }

  // Whether rows [m0, min(m0 + block_m, seq_q)) need the per-element mask; q_ranges: this batch
  // entry's [ceil(seq_q / 64), 2] chunk ranges (read only with segment ids).
  template <int BlockM>
  __device__ __forceinline__ bool needs_mask(int m0, int seq_q, const int32_t* q_ranges) const {
    const int r1 = min(m0 + BlockM, seq_q);
    if (m0 < full_lo || r1 > full_hi) return true;
    if (seg) {
      for (int c = m0 / kSegmentChunk; c <= (r1 - 1) / kSegmentChunk; ++c)
        if (q_ranges[2 * c] != seg_id || q_ranges[2 * c + 1] != seg_id) return true;
    }
    return false;
  }
};

// BwdVariantFacts::seg's bit for a key block whose chunks all hold seg_id.
constexpr int kBwdKeysUniform = 2;

// What the consumers need of the variant's mask, one copy per consumer warp in shared memory
// (Cfg::variant_offset), written by the warp's lane 0 at the tile's start: reading it back each
// step (volatile loads, never hoisted into registers) keeps the consumers' register budget for
// dK, dV and the scores. The element test rebuilds a TileMask from it (variant_mask).
struct BwdVariantFacts {
  int q_len, kv_len, off;
  int full_lo, full_hi, seg_id;
  int seg;  // bit 0: segment ids; bit 1 (kBwdKeysUniform): BwdVariantTile::keys_uniform
  int m_begin, m_end;  // the tile's query blocks (bwd_query_blocks)
  const int32_t* q_ids;
  const int32_t* kv_ids;
  const int32_t* q_ranges;
};
static_assert(sizeof(BwdVariantFacts) <= 64, "one 64-byte slot per consumer warp (config.cuh)");

// The warp's slot, its address recomputed from %tid.x (read by a volatile asm, so not hoisted out
// of the main loop) and the dynamic shared base: no register stays live across the loop for it
// (as stage_dq_tile's).
// warp: the consumer warp (0 .. 7) whose copy to read; -1: the caller's own.
template <class Cfg>
__device__ __forceinline__ volatile BwdVariantFacts* bwd_variant_slot(uint8_t*, int warp = -1) {
  extern __shared__ uint8_t smem_raw[];
  uint32_t tid;
  asm volatile("mov.u32 %0, %%tid.x;" : "=r"(tid));
  uint8_t* smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
  return reinterpret_cast<volatile BwdVariantFacts*>(smem + Cfg::variant_offset()) +
         (warp >= 0 ? warp : int(tid / 32) - 4);
}

// Lane 0 of each consumer warp writes its warp's copy for key block [c0, c1); the warp syncs.
template <class Cfg>
__device__ __forceinline__ void bwd_write_variant_facts(uint8_t* smem, const TileMask<MaskKind::kVariant>& mask,
                                                        int c0, int c1, const int32_t* q_ranges, int m_begin,
                                                        int m_end) {
  if (threadIdx.x % 32 == 0) {
    const BwdVariantTile vt(mask, c0, c1);
    volatile BwdVariantFacts* f = bwd_variant_slot<Cfg>(smem);
    f->q_len = mask.q_len;
    f->kv_len = mask.kv_len;
    f->off = mask.off;
    f->full_lo = vt.full_lo;
    f->full_hi = vt.full_hi;
    f->seg_id = vt.seg_id;
    f->seg = (vt.seg ? 1 : 0) | (vt.keys_uniform ? kBwdKeysUniform : 0);
    f->q_ids = mask.q_ids;
    f->kv_ids = mask.kv_ids;
    f->q_ranges = q_ranges;
    f->m_begin = m_begin;
    f->m_end = m_end;
  }
  __syncwarp();
}

// Whether rows [m0, min(m0 + BlockM, seq_q)) need the element mask (BwdVariantTile::needs_mask
// from the warp's copy).
template <class Cfg>
__device__ __forceinline__ bool bwd_variant_needs_mask(uint8_t* smem, int m0, int seq_q) {
  const volatile BwdVariantFacts* f = bwd_variant_slot<Cfg>(smem);
  const int r1 = min(m0 + Cfg::block_m(), seq_q);
  if (m0 < f->full_lo || r1 > f->full_hi) return true;
  if (f->seg & 1) {
    const int32_t* q_ranges = f->q_ranges;
    const int id = f->seg_id;
    for (int c = m0 / kSegmentChunk; c <= (r1 - 1) / kSegmentChunk; ++c)
      if (q_ranges[2 * c] != id || q_ranges[2 * c + 1] != id) return true;
  }
  return false;
}

// Whether a step of query rows [m0, min(m0 + BlockM, seq_q)) that needs the element mask needs
// the segment-id compare too: not when the block's keys and those rows' 64-row chunks all hold
// the one id seg_id (a packed document's diagonal step: its band alone is partial).
template <class Cfg>
__device__ __forceinline__ bool bwd_variant_step_needs_ids(uint8_t* smem, int m0, int seq_q) {
  const volatile BwdVariantFacts* f = bwd_variant_slot<Cfg>(smem);
  if (!(f->seg & 1)) return false;
  if (!(f->seg & kBwdKeysUniform)) return true;
  const int32_t* q_ranges = f->q_ranges;
  const int id = f->seg_id;
  const int r1 = min(m0 + Cfg::block_m(), seq_q);
  for (int c = m0 / kSegmentChunk; c <= (r1 - 1) / kSegmentChunk; ++c)
    if (q_ranges[2 * c] != id || q_ranges[2 * c + 1] != id) return true;
  return false;
}

// The batch entry's band-and-lengths mask with its segment ids, from the warp's copy.
// warp as for bwd_variant_slot: the dQ writer reads consumer warp 0's copy, which its first sync
// on warpgroup 0's DqFull barrier orders after the write.
template <class Cfg>
__device__ __forceinline__ TileMask<MaskKind::kVariant> bwd_variant_mask(uint8_t* smem, const BwdArgs& args,
                                                                         int warp = -1) {
  const volatile BwdVariantFacts* f = bwd_variant_slot<Cfg>(smem, warp);
  TileMask<MaskKind::kVariant> m(args.seq_q, args.seq_k);
  m.q_len = f->q_len;
  m.kv_len = f->kv_len;
  m.off = f->off;
  m.left = args.mask.window_left;
  m.right = args.mask.window_right;
  m.q_ids = f->q_ids;
  m.kv_ids = f->kv_ids;
  return m;
}

// The registers per thread every warp holds at entry: __launch_bounds__(threads, 1) lets ptxas
// use 64K / threads, rounded down to the allocation unit of 8 (168 at 384 threads; ptxas -v
// reports exactly that for every backward main kernel). The CTA's register pool is that many per
// thread and setmaxnreg only moves registers inside it: a setmaxnreg.inc waits until enough
// registers were given back by setmaxnreg.dec, so if the warpgroups' targets add up to more
// than threads() x this, a consumer warpgroup waits in setmaxnreg.inc forever (the whole CTA
// hangs: its partner blocks at the first Pds barrier, the loader on a full ring).
template <class Cfg>
constexpr int bwd_entry_regs() {
  return 65536 / Cfg::threads() / 8 * 8;
}

// The producer warpgroup's registers: whatever the consumer warpgroups leave of the CTA's pool
// (the configuration's own producer_regs() for every configuration built: 24 beside 2 x 240, 40
// beside 2 x 232). The kVariant kernels too: their loader and writer evaluate the variant's
// ranges (and the writer its deterministic ranks) at that budget, spilling there rather than in
// the consumers. (512 - 2 x 240 = 32 overdrew the 504-register pool by 8 per thread: the second
// consumer warpgroup's setmaxnreg.inc never returned.)
template <class Cfg, MaskKind K>
constexpr int bwd_producer_regs() {
  constexpr int pool = (1 + Cfg::consumer_warpgroups()) * bwd_entry_regs<Cfg>();
  constexpr int regs = pool - Cfg::consumer_warpgroups() * Cfg::consumer_regs();
  static_assert(regs >= 24 && regs % 8 == 0, "setmaxnreg takes 24 .. 256 in steps of 8");
  static_assert(regs == Cfg::producer_regs(), "the configuration's producer share is the pool's remainder");
  return regs;
}

// This batch entry's query chunk ranges (valid with segment ids).
__device__ __forceinline__ const int32_t* bwd_q_ranges(const BwdArgs& args, int batch) {
  return args.mask.q_ranges + int64_t(batch) * 2 * ((args.seq_q + kSegmentChunk - 1) / kSegmentChunk);
}

}  // namespace fa4::hopper
