// The dQ path to global memory and its deterministic ordering.
//
// hd64 / hd128: the consumers write their dQ pieces to a float32 shared-memory tile
// (stage_dq_tile) and warp 1 of the producer warpgroup, the writer, adds the whole tile to
// dq_accum with one 1-D bulk reduce-add (cp.reduce.async.bulk .add.f32) per step
// (bwd_dq_writer, bwd_dq_writer_persistent). hd256 adds from the consumers (kernel_kv80.cuh),
// ordered in deterministic mode by dq_tile_wait / dq_tile_signal.
//
// Determinism: the float32 adds into dQ arrive in an order set by the hardware, so dq can differ
// in its last bits between runs (dk and dv never do: one CTA sums them in registers in a fixed
// order). With args.deterministic (a runtime flag: one instantiation serves both modes) the adds
// of each (batch, q head, query block m) are ordered by key block, FA3's scheme: an int32
// semaphore per (batch, q head, query block), zeroed before the preprocess, counts the key blocks
// that have added; a key block waits until it equals its rank (bwd_dq_rank), adds its whole tile,
// makes the adds visible, and stores rank + 1. The key blocks that visit m are exactly n = 0 ..
// n_last(m) (the mask's first query block never decreases with n), or with a causal band's left
// edge n_first(m) .. n_last(m) (its last query block never decreases either); non-causal ranks
// them n, causal n_last(m) - n, the number of visiting key blocks above n, band or not
// (descending: the highest key block reaches m first) with the key blocks launched last-first
// (BwdGridScheduler). Either way a CTA only waits for CTAs of lower
// blockIdx.x, dispatched before it. Variant problems (kVariant) rank descending too, by counting
// the key blocks above n whose band-and-lengths range holds m (bwd_dq_rank_variant), launched
// last-first like causal.
#pragma once
#include <cstdint>

#include "hopper/bwd/args.cuh"
#include "hopper/bwd/scheduler.cuh"
#include "hopper/bwd/variant.cuh"
#include "hopper/ptx/barrier.cuh"
#include "hopper/ptx/bulk_copy.cuh"
#include "hopper/ptx/mbarrier.cuh"
#include "hopper/ptx/memory_order.cuh"

namespace fa4::hopper {

// Deterministic mode: key block n's place in the order of the dQ adds to query block m. The key
// blocks visiting m are n = 0 (n_first(m) under a causal band) .. n_last(m) (bwd_query_blocks: n
// <= n_last(m) iff n * block_n < x below).
// Non-causal adds them in index order; causal in descending order, because the highest key block
// reaches m first (its first query block is the latest), so in steady state nobody waits (in
// index order every CTA would wait at its diagonal for all lower key blocks, halving throughput).
template <class Cfg, MaskKind K>
__device__ __forceinline__ int bwd_dq_rank(const BwdArgs& args, int n, int m) {
  static_assert(K != MaskKind::kVariant, "variant ranks: bwd_dq_rank_variant");
  if constexpr (K == MaskKind::kCausal) {
    const int x = (m + 1) * Cfg::block_m() + args.seq_k - args.seq_q;  // > n * block_n >= 0
    return min(int(gridDim.x) - 1, (x - 1) / Cfg::block_n()) - n;
  } else {
    return n;
  }
}

// The variant kernels' rank (warp-collective: all 32 lanes, uniform arguments): the number of key
// blocks n' > n whose band-and-lengths range (bwd_query_blocks, which does not narrow by segment
// in deterministic mode) holds m, i.e. the key blocks that add into m before n does. Descending
// like causal, for the same reason (the band's first query block never decreases with n), and
// the key blocks launch last-first (BwdGridScheduler), so a CTA only waits on CTAs dispatched
// before it. Counted rather than derived from a formula, so the rank is right whatever shape
// the range takes at the sequence ends (clipped lengths, empty key blocks).
template <class Cfg>
__device__ __forceinline__ int bwd_dq_rank_variant(const BwdArgs& args, const TileMask<MaskKind::kVariant>& mask,
                                                   int n, int m) {
  int count = 0;
#pragma unroll 1
  for (int np = n + 1 + int(threadIdx.x % 32); np < args.n_blocks; np += 32) {
    int b, e;
    bwd_variant_query_blocks<Cfg>(mask, false, np * Cfg::block_n(), &b, &e);
    count += (m >= b && m < e) ? 1 : 0;
  }
  return int(__reduce_add_sync(0xffffffffu, unsigned(count)));
}

// Deterministic mode, before this CTA's dQ adds to one query block: one thread spins until the
// block's semaphore says that every earlier key block (rank < n) has added, then both consumer
// warpgroups pass a barrier. The acquire load plus the barrier order every later red.global of
// the CTA after the previous key block's adds.
__device__ __forceinline__ void dq_tile_wait(const int* sem, int rank, bool spinner) {
  if (spinner) {
    while (ld_acquire_gpu(sem) != rank) {
    }
  }
  __syncwarp();  // the spinner's warp reconverges before the (aligned) bar.sync
  named_barrier_sync(kBwdBarDq, kBwdConsumerThreads);
}

// After them: every thread makes its own adds visible at GPU scope, both warpgroups meet, and one
// thread hands the block to the next key block (rank + 1) with a release store.
__device__ __forceinline__ void dq_tile_signal(int* sem, int rank, bool signaller) {
  __threadfence();
  named_barrier_sync(kBwdBarDq, kBwdConsumerThreads);
  if (signaller) st_release_gpu(sem, rank + 1);
}

// Consumer side of one step's dQ. Waits until the writer warp has finished reading this
// warpgroup's piece of the shared dQ tile of the previous step (its kBwdBarDqEmpty), writes the
// piece in fragment order (Cfg::dq_frag_offset: a warp's float2 stores cover 256 contiguous
// bytes, no bank conflict), makes the generic-proxy stores visible to the async proxy, and
// signals the writer without waiting (its kBwdBarDqFull). The other warpgroup is not waited for.
template <class Cfg>
__device__ __forceinline__ void stage_dq_tile(const float (&dq)[Cfg::dq_regs()]) {
  // The tile's 32-bit shared address and this thread's place in it are recomputed here from
  // constants and %tid.x (read by a volatile asm, so not hoisted out of the main loop): no
  // register stays live across the loop for them (a live 64-bit pointer cost a spill at hd64).
  extern __shared__ uint8_t smem_raw[];
  uint32_t tid;
  asm volatile("mov.u32 %0, %%tid.x;" : "=r"(tid));
  const uint32_t raw = smem_addr(smem_raw);
  const uint32_t wg = tid / 128 - 1;
  const uint32_t base = raw + ((1024 - (raw & 1023)) & 1023) + Cfg::dq_offset() +
                        4 * uint32_t(Cfg::dq_frag_offset(int(wg), int(tid % 128), 0));
  named_barrier_sync(kBwdBarDqEmpty + wg, kBwdDqBarrierThreads);
#pragma unroll
  for (int u = 0; u < Cfg::dq_regs() / 2; ++u) {
    static_assert(Cfg::dq_frag_offset(0, 0, 2) == 256, "one register pair = 128 threads x 2 floats");
    asm volatile("st.shared.v2.f32 [%0], {%1, %2};" ::"r"(base + 1024 * u), "f"(dq[2 * u]), "f"(dq[2 * u + 1])
                 : "memory");
  }
  fence_proxy_async_smem();
  named_barrier_arrive(kBwdBarDqFull + wg, kBwdDqBarrierThreads);
}

// The writer's pre-arrival on both pieces' empty barriers, so the consumers' first waits pass.
__device__ __forceinline__ void dq_pieces_free() {
  named_barrier_arrive(kBwdBarDqEmpty, kBwdDqBarrierThreads);
  named_barrier_arrive(kBwdBarDqEmpty + 1, kBwdDqBarrierThreads);
}

// The writer frees piece w of the shared tile for the next step once the bulk engine has read it
// (lane 0 waits; the warp then arrives).
__device__ __forceinline__ void dq_piece_free(int w, int lane) {
  if (lane == 0) bulk_wait_read();
  __syncwarp();
  named_barrier_arrive(kBwdBarDqEmpty + uint32_t(w), kBwdDqBarrierThreads);
}

// The dQ writer, warp 1 of the producer warpgroup (all 32 lanes: the named barriers
// count whole warps). Per step, in the consumers' (head, query block) order, for each consumer
// warpgroup's piece in turn: wait until that warpgroup has staged it (its kBwdBarDqFull), lane 0
// adds the piece to dq_accum with one bulk reduce-add, waits until the bulk engine has read it,
// and the warp frees it (its kBwdBarDqEmpty; one pre-arrival each so the consumers' first waits
// pass, none after the last step so no barrier generation is left open). A warpgroup thus waits
// only for its own previous piece to be read, never for the other warpgroup's staging. THE place
// where dQ reaches global memory, so deterministic mode orders the adds here: lane 0 waits on the
// (batch, head, query block) semaphore before the first piece's reduce and, after the second's
// and bulk_wait_all(), hands the block to the next key block.
template <class Cfg, MaskKind K>
__device__ __forceinline__ void bwd_dq_writer(uint8_t* smem, const BwdArgs& args, int n0, int kv_head, int batch,
                                              int lane) {
  int m_begin, m_end;
  bwd_query_blocks<Cfg, K>(args, batch, n0, &m_begin, &m_end);
  const int total_steps = m_end > m_begin ? args.group * (m_end - m_begin) : 0;
  if (total_steps == 0) return;
  const float* sdq = reinterpret_cast<const float*>(smem + Cfg::dq_offset());
  dq_pieces_free();
  int step = 0;
  for (int g = 0; g < args.group; ++g) {
    const int head = kv_head * args.group + g;
    float* dq_rows = args.dq_accum + (int64_t(batch) * args.heads_q + head) * args.seq_q_pad * Cfg::head_dim();
    for (int m = m_begin; m < m_end; ++m) {
      float* dq_tile = dq_rows + int64_t(m) * Cfg::block_m() * Cfg::head_dim();
      const bool more = ++step < total_steps;
      named_barrier_sync(kBwdBarDqFull, kBwdDqBarrierThreads);
      // Deterministic mode: this key block's place in m's order (bwd_dq_rank).
      int* sem = args.deterministic ? args.dq_sem + (int64_t(batch) * args.heads_q + head) * (args.seq_q_pad / 64) + m
                                    : nullptr;
      // kVariant: the rank by the whole warp (bwd_dq_rank_variant is collective).
      int vrank = 0;
      if constexpr (K == MaskKind::kVariant) {
        // The mask from consumer warp 0's shared copy (written before its first DqFull arrival).
        if (sem) vrank = bwd_dq_rank_variant<Cfg>(args, bwd_variant_mask<Cfg>(smem, args, 0), n0 / Cfg::block_n(), m);
      }
      int rank = 0;
      if (lane == 0) {
        if constexpr (K == MaskKind::kVariant) {
          rank = vrank;
        } else {
          rank = sem ? bwd_dq_rank<Cfg, K>(args, n0 / Cfg::block_n(), m) : 0;
        }
        if (sem) {
          while (ld_acquire_gpu(sem) != rank) {
          }
          fence_proxy_async_global();  // the bulk reduce (async proxy) after the acquire
        }
        bulk_reduce_add_f32(dq_tile, sdq, Cfg::dq_piece_bytes());
        bulk_commit();
      }
      if (more) dq_piece_free(0, lane);
      __syncwarp();  // lane 0's spin and reduce reconverge before the (aligned) bar.sync
      named_barrier_sync(kBwdBarDqFull + 1, kBwdDqBarrierThreads);
      if (lane == 0) {
        bulk_reduce_add_f32(dq_tile + Cfg::dq_piece_floats(), sdq + Cfg::dq_piece_floats(), Cfg::dq_piece_bytes());
        bulk_commit();
        if (sem) {
          bulk_wait_all();             // both pieces' global writes are done ...
          fence_proxy_async_global();  // ... and ordered before the generic-proxy release
          __threadfence();
          st_release_gpu(sem, rank + 1);
        }
      }
      if (more) dq_piece_free(1, lane);
    }
  }
  if (lane == 0) bulk_wait_all();  // source reads and global writes done before the CTA exits
}

// The persistent kernel's dQ writer: bwd_dq_writer's protocol run on across tiles (one
// pre-arrival per piece at the start, an arrival after every step but the CTA's very last). At a
// tile's last step, once the first piece is staged, it peeks at the next tile id (published by
// the loader once it has issued all of this tile's loads, which it has: that piece's DqFull means
// this step's Q/dO arrived) to know whether that step is the last one.
template <class Cfg, MaskKind K>
__device__ __forceinline__ void bwd_dq_writer_persistent(uint8_t* smem, const BwdArgs& args, uint64_t* tile_full,
                                                         uint64_t* tile_empty, const int* ids, int lane) {
  const float* sdq = reinterpret_cast<const float*>(smem + Cfg::dq_offset());
  int it = 0;
  mbarrier_wait(&tile_full[0], 0);
  int id = BwdPersistentScheduler::read_tile_id(ids, tile_empty, 0);
  if (id < 0) return;
  dq_pieces_free();
  while (true) {
    int n_block, kv_head, batch, m_begin, m_end;
    BwdPersistentScheduler::tile_coords(args, id, &n_block, &kv_head, &batch);
    static_assert(K != MaskKind::kVariant, "the persistent kernel runs dense and causal problems only");
    bwd_query_blocks<Cfg, K>(args, batch, n_block * Cfg::block_n(), &m_begin, &m_end);
    // Every tile has a step: seq_q > 0 (the launch returns early otherwise), so m_begin < m_end.
    int next = -1;
    for (int g = 0; g < args.group; ++g) {
      const int head = kv_head * args.group + g;
      float* dq_rows = args.dq_accum + (int64_t(batch) * args.heads_q + head) * args.seq_q_pad * Cfg::head_dim();
      for (int m = m_begin; m < m_end; ++m) {
        float* dq_tile = dq_rows + int64_t(m) * Cfg::block_m() * Cfg::head_dim();
        named_barrier_sync(kBwdBarDqFull, kBwdDqBarrierThreads);
        if (lane == 0) {
          bulk_reduce_add_f32(dq_tile, sdq, Cfg::dq_piece_bytes());
          bulk_commit();
        }
        bool more = true;
        if (g == args.group - 1 && m == m_end - 1) {
          mbarrier_wait(&tile_full[(it + 1) & 1], ((it + 1) >> 1) & 1);
          next = BwdPersistentScheduler::read_tile_id(ids, tile_empty, it + 1);
          more = next >= 0;
        }
        if (more) dq_piece_free(0, lane);
        __syncwarp();  // lane 0's reduce reconverges before the (aligned) bar.sync
        named_barrier_sync(kBwdBarDqFull + 1, kBwdDqBarrierThreads);
        if (lane == 0) {
          bulk_reduce_add_f32(dq_tile + Cfg::dq_piece_floats(), sdq + Cfg::dq_piece_floats(), Cfg::dq_piece_bytes());
          bulk_commit();
        }
        if (more) dq_piece_free(1, lane);
      }
    }
    ++it;
    if (next < 0) break;
    id = next;
  }
  if (lane == 0) bulk_wait_all();
}

}  // namespace fa4::hopper
