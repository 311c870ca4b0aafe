// The hd256 backward main kernel with 80-key blocks (the BwdHd256 configuration; FA3's hd256
// shape on Hopper). One CTA owns 80 keys of one kv head, so each query's dQ gets 20% fewer float32
// reduce-adds than with 64-key blocks -- the L2 reduce traffic is what bounds the hd256 backward.
// 80 keys do not split into m64 rows, so the products are taken the other way round from
// mainloop.cuh's:
//   S = Q K^T and dP = dO V^T     M = 64 queries, N = 40 keys per warpgroup (c: keys 40c ..), K = hd
//   P = 2^(S scale log2e - lse2), dS = P (dP - delta')   per query row: two lse2 / delta' per thread
//   P^T, dS^T -> shared memory    stmatrix .trans into [80 keys][64 queries] buffers
//   dV^T += dO^T P, dK^T += Q^T dS   M = head dim (warpgroup c: rows 128c .. 128c + 127 as two m64
//                                 blocks), N = 80 keys, K = 64 queries: 2 x 40 + 2 x 40 registers
//   dQ^T = K^T dS^T               M = head dim (the same rows), N = 64 queries, K = 80 keys, in two
//                                 64-row pieces of 32 registers, each added to dq_accum with 16-byte
//                                 red.global.add.v4 as soon as it retired
// Shared memory: K, V (40 KB each), Q ring 2 x 32 KB, dO ring 1 x 32 KB (two do not fit beside two
// Q stages), P^T and dS^T 2 x 10 KB each: 218 KB. dO(t) is freed as soon as dV^T(t) retired, so
// dO(t + 1) loads while dK^T, dQ^T and the adds of step t run.
// dq_accum: each 64-query tile holds four 64 x 64 pieces (head-dim rows 64p .., p = 2c + block) in
// fragment order (dq_frag_offset); the postprocess reads it through dq_accum_offset_any.
// Epilogue: dK^T (times softmax_scale) and dV^T go back through shared memory transposed
// (stmatrix .trans) and out as 16-byte row stores.
#pragma once
#include <cuda.h>

#include <cstdint>

#include "hopper/bwd/args.cuh"
#include "hopper/bwd/config.cuh"
#include "hopper/bwd/dq_writer.cuh"
#include "hopper/bwd/producer.cuh"
#include "hopper/bwd/scheduler.cuh"
#include "hopper/bwd/variant.cuh"
#include "hopper/common/mask.cuh"
#include "hopper/common/numeric.cuh"
#include "hopper/common/pipeline.cuh"
#include "hopper/ptx/barrier.cuh"
#include "hopper/ptx/grid_dependency.cuh"
#include "hopper/ptx/mbarrier.cuh"
#include "hopper/ptx/reduce.cuh"
#include "hopper/ptx/stmatrix.cuh"
#include "hopper/ptx/tma.cuh"
#include "hopper/ptx/wgmma.cuh"
#include "hopper/ptx/wgmma_mma.cuh"

namespace fa4::hopper {

// S (or dP) of this warpgroup: 64 queries x 40 keys [40c, 40c + 40) = X Y^T over the head dim,
// X = the Q (dO) tile, Y = K (V) rows; both K-major. Caller fences and commits.
template <class T, class Cfg>
__device__ __forceinline__ void kv80_scores(float (&acc)[20], const uint8_t* x_tile, const uint8_t* y_tile, int c) {
  using Tag = typename WgmmaTag<T>::type;
#pragma unroll
  for (int kk = 0; kk < Cfg::head_dim() / 16; ++kk) {
    const int chunk = kk / 4;
    const uint32_t within = (kk % 4) * 32;
    const auto a = MmaSmemDescriptor::sw128(x_tile + chunk * Cfg::chunk_bytes_q(), 0).plus_bytes(within);
    const auto b = MmaSmemDescriptor::sw128(y_tile + chunk * Cfg::chunk_bytes_kv() + 40 * c * 128, 0)
                       .plus_bytes(within);
    WgmmaSS<Tag, 40>::template mma<0, 0>(acc, a.bits, b.bits, kk > 0 ? 1u : 0u);
  }
}

// acc (64 head-dim rows [64 piece ..) x 80 keys) += X^T Y: X = the Q or dO tile read MN-major
// (its chunk `piece`: head dim contiguous, queries are rows), Y = the dS^T or P^T buffer K-major
// (80 key rows, queries contiguous). Caller fences and commits.
template <class T, class Cfg>
__device__ __forceinline__ void kv80_dkv(float (&acc)[40], const uint8_t* x_tile, int piece, const uint8_t* y_buf) {
  using Tag = typename WgmmaTag<T>::type;
  const auto a = MmaSmemDescriptor::sw128(x_tile + piece * Cfg::chunk_bytes_q(), Cfg::chunk_bytes_q());
  const auto b = MmaSmemDescriptor::sw128(y_buf, 0);
#pragma unroll
  for (int kk = 0; kk < Cfg::block_m() / 16; ++kk) {
    WgmmaSS<Tag, 80>::template mma<1, 0>(acc, a.plus_bytes(kk * 16 * 128).bits, b.plus_bytes(kk * 32).bits, 1u);
  }
}

// dQ^T piece (64 head-dim rows [64 piece ..) x 64 queries) = K^T dS^T over the 80 keys: A = K's
// chunk `piece` MN-major (head dim contiguous, keys are rows), B = the dS^T buffer MN-major
// (queries contiguous, keys are rows). Caller fences and commits.
template <class T, class Cfg>
__device__ __forceinline__ void kv80_dq(float (&acc)[32], const uint8_t* k_tile, int piece, const uint8_t* dst_buf) {
  using Tag = typename WgmmaTag<T>::type;
  const auto a = MmaSmemDescriptor::sw128(k_tile + piece * Cfg::chunk_bytes_kv(), Cfg::chunk_bytes_kv());
  const auto b = MmaSmemDescriptor::sw128(dst_buf, Cfg::chunk_bytes_kv());
#pragma unroll
  for (int kk = 0; kk < Cfg::block_n() / 16; ++kk) {
    WgmmaSS<Tag, 64>::template mma<1, 1>(acc, a.plus_bytes(kk * 16 * 128).bits,
                                              b.plus_bytes(kk * 16 * 128).bits, kk > 0 ? 1u : 0u);
  }
}

// A 64 x 40 accumulator-layout tile of packed pairs (queries x this warpgroup's keys) stored
// transposed into a [80 keys][64 queries] buffer (128-byte swizzle): matrices (j, i) = keys
// 8j .., queries 16 warp + 8i ..; x4 covers j and j + 1, the fifth j an x2.
template <class Cfg>
__device__ __forceinline__ void kv80_store_transposed(uint8_t* buf, const uint32_t (&v)[10], int c, int warp,
                                                      int lane) {
  const uint32_t base = smem_addr(buf);
  const int m = lane / 8;  // the matrix whose row (after the transpose) this lane addresses
#pragma unroll
  for (int j = 0; j < 4; j += 2) {
    const int key = 40 * c + 8 * (j + m / 2) + lane % 8;
    const int query = 16 * warp + 8 * (m % 2);
    stmatrix_x4_trans(base + sw128_offset(key, query, Cfg::chunk_bytes_kv()), v[2 * j], v[2 * j + 1], v[2 * j + 2],
                      v[2 * j + 3]);
  }
  const int key = 40 * c + 32 + lane % 8;
  const int query = 16 * warp + 8 * ((lane / 8) % 2);
  stmatrix_x2_trans(base + sw128_offset(key, query, Cfg::chunk_bytes_kv()), v[8], v[9]);
}

// dQ^T piece p of query tile m0 (32 accumulators) into dq_accum with 16-byte adds.
template <class Cfg>
__device__ __forceinline__ void kv80_add_dq(float* dq_rows, const float (&dq)[32], int m0, int piece, int tid) {
  float* base = dq_rows + int64_t(m0) * Cfg::head_dim() + Cfg::dq_frag_offset(piece, tid, 0);
#pragma unroll
  for (int j = 0; j < 8; ++j) red_add_f32x4(base + 4 * 128 * j, dq[4 * j], dq[4 * j + 1], dq[4 * j + 2], dq[4 * j + 3]);
}

// dK^T or dV^T (two 64 x 80 pieces of head-dim rows 128c + 64b ..) times `scale`, transposed into
// the [80 keys][256] staging rows.
template <class T, class Cfg>
__device__ __forceinline__ void kv80_stage_dkv(uint8_t* stage, const float (&acc)[2][40], float scale, int c,
                                               int warp, int lane) {
  const uint32_t base = smem_addr(stage);
  const int m = lane / 8;
#pragma unroll
  for (int b = 0; b < 2; ++b) {
#pragma unroll
    for (int j = 0; j < 10; j += 2) {
      uint32_t v[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const int jj = j + u / 2, i = u % 2;
        v[u] = pack2<T>(acc[b][4 * jj + 2 * i] * scale, acc[b][4 * jj + 2 * i + 1] * scale);
      }
      const int key = 8 * (j + m / 2) + lane % 8;
      const int col = 128 * c + 64 * b + 16 * warp + 8 * (m % 2);
      stmatrix_x4_trans(base + key * Cfg::epi_row_bytes() + col * 2, v[0], v[1], v[2], v[3]);
    }
  }
}

// The staged [80][256] rows out to [batch, seq_k, heads_kv, 256] with 16-byte stores (both consumer
// warpgroups, 256 threads); rows past seq_k dropped.
template <class Cfg>
__device__ __forceinline__ void kv80_write_rows(void* out, const uint8_t* stage, const BwdArgs& args, int n0,
                                                int kv_head, int batch, int ctid) {
  constexpr int kUnits = Cfg::head_dim() * 2 / 16;  // 16-byte units per row
#pragma unroll 2
  for (int u = ctid; u < Cfg::block_n() * kUnits; u += 256) {
    const int row = u / kUnits, unit = u % kUnits;
    if (n0 + row >= args.seq_k) continue;
    const uint4 val = *reinterpret_cast<const uint4*>(stage + row * Cfg::epi_row_bytes() + unit * 16);
    uint8_t* dst = static_cast<uint8_t*>(out) +
                   (((int64_t(batch) * args.seq_k + n0 + row) * args.heads_kv + kv_head) * Cfg::head_dim()) * 2 +
                   unit * 16;
    *reinterpret_cast<uint4*>(dst) = val;
  }
}

// The packed-pair mask of pair k (entries 2k, 2k + 1) from a visibility word.
__device__ __forceinline__ uint32_t kv80_keep(uint32_t vis, int k) {
  const uint32_t lo = 0u - ((vis >> (2 * k)) & 1u), hi = 0u - ((vis >> (2 * k + 1)) & 1u);
  return (lo & 0x0000ffffu) | (hi & 0xffff0000u);
}

// kVariant: the visibility of a thread's entries (query rows query0, query0 + 8; keys
// key0 + 8j + e), bit 4j + 2i + e, from the warp's shared mask copy, in a rolled loop (few live
// registers beside dK and dV).
template <class Cfg>
__device__ __forceinline__ uint32_t kv80_variant_visibility(uint8_t* smem, const BwdArgs& args, int query0,
                                                            int key0) {
  asm volatile("" : "+r"(query0), "+r"(key0));  // nothing hoisted out of the main loop
  const TileMask<MaskKind::kVariant> mask = bwd_variant_mask<Cfg>(smem, args);
  const bool seg = mask.q_ids != nullptr;
  int lo[2], hi[2], qid[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int query = query0 + 8 * i;
    lo[i] = mask.key_lo(query);
    hi[i] = query < mask.q_len ? mask.key_hi(query) : 0;
    qid[i] = seg ? __ldg(mask.q_ids + min(query, args.seq_q - 1)) : 0;
  }
  uint32_t vis = 0;
#pragma unroll 1
  for (int j = 0; j < 5; ++j) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int key = key0 + 8 * j + e;
      const int kid = seg ? __ldg(mask.kv_ids + min(key, args.seq_k - 1)) : 0;
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const bool visible = key >= lo[i] && key < hi[i] && kid == qid[i];
        vis |= uint32_t(visible ? 1 : 0) << (4 * j + 2 * i + e);
      }
    }
  }
  return vis;
}

// The consumers' steps. Masking, the NaN-safe selects and the soft cap as in bwd_p_ds
// (mainloop.cuh), in this kernel's layout (a thread holds query rows qrow, qrow + 8 and keys
// key0 + 8j + e); the soft cap's 1 - t^2 waits in gk as packed halves.
template <class T, class Cfg, MaskKind K, bool SoftCap, class QRing, class DoRing>
__device__ __forceinline__ void kv80_consumer(int c, uint8_t* smem, uint64_t* kv_full, QRing& q, DoRing& dO,
                                              const BwdArgs& args, int n0, int kv_head, int batch) {
  const int tid = threadIdx.x % 128;
  const int warp = tid / 32;
  const int lane = tid % 32;
  const bool elected = tid == 0;
  constexpr int BM = Cfg::block_m();
  uint8_t* sK = smem + Cfg::k_offset();
  uint8_t* sV = smem + Cfg::v_offset();
  const float* sLse = reinterpret_cast<const float*>(smem + Cfg::lse_offset());
  const float* sDelta = reinterpret_cast<const float*>(smem + Cfg::delta_offset());

  float dk[2][40];
  float dv[2][40];
#pragma unroll
  for (int b = 0; b < 2; ++b) {
#pragma unroll
    for (int i = 0; i < 40; ++i) dk[b][i] = dv[b][i] = 0.f;
  }

  constexpr bool Causal = K == MaskKind::kCausal;
  int m_begin, m_end;
  bwd_query_blocks<Cfg, K>(args, batch, n0, &m_begin, &m_end);
  // kVariant: the tile's mask facts into the warp's shared copy (variant.cuh).
  if constexpr (K == MaskKind::kVariant) {
    bwd_write_variant_facts<Cfg>(smem, TileMask<K>(args.mask, batch), n0, n0 + Cfg::block_n(),
                                 bwd_q_ranges(args, batch), m_begin, m_end);
  }
  const bool any = m_end > m_begin;
  if (any) mbarrier_wait(kv_full, 0);

  const int qrow = 16 * warp + lane / 4;                  // this thread's first query row in the tile (+8)
  const int key0 = n0 + 40 * c + 2 * (lane % 4);          // its first key column (+8j, +e)
  const bool dq_sem_thread = c == 0 && elected;
  int step = 0;
  for (int g = 0; any && g < args.group; ++g) {
    const int head = kv_head * args.group + g;
    float* dq_rows = args.dq_accum + (int64_t(batch) * args.heads_q + head) * args.seq_q_pad * Cfg::head_dim();
    // kVariant: the range from the warp's shared copy (the narrowed range cannot be recomputed
    // from the kernel arguments, and kept in registers it spilled).
    auto range_end = [&] {
      if constexpr (K == MaskKind::kVariant) {
        return int(bwd_variant_slot<Cfg>(smem)->m_end);
      } else {
        return m_end;
      }
    };
    int m_first = m_begin;
    if constexpr (K == MaskKind::kVariant) m_first = bwd_variant_slot<Cfg>(smem)->m_begin;
    for (int m = m_first; m < range_end(); ++m, ++step) {
      const int m0 = m * BM;
      const uint8_t* q_tile = q.get();
      const uint8_t* do_tile = dO.get();
      const float* lse = sLse + q.pipe.stage * BM;
      const float* delta = sDelta + dO.pipe.stage * BM;
      uint8_t* pt = smem + Cfg::pt_offset() + (step % Cfg::pds_stages()) * Cfg::pds_tile_bytes();
      uint8_t* dst = smem + Cfg::dst_offset() + (step % Cfg::pds_stages()) * Cfg::pds_tile_bytes();

      float s[20];
      float dp[20];
      q.wait(0);
      wgmma_fence();
      kv80_scores<T, Cfg>(s, q_tile, sK, c);
      wgmma_commit();
      dO.wait(0);
      wgmma_fence();
      kv80_scores<T, Cfg>(dp, do_tile, sV, c);
      wgmma_commit();

      // P = 2^(S scale log2e - lse2[query]) (masked keys exactly 0), then dS = P (dP - delta').
      bool need_mask;
      if constexpr (K == MaskKind::kVariant) {
        need_mask = bwd_variant_needs_mask<Cfg>(smem, m0, args.seq_q);
      } else {
        need_mask =
            n0 + Cfg::block_n() > args.seq_k || (Causal && n0 + Cfg::block_n() - 1 > m0 + args.seq_k - args.seq_q);
      }
      const float l[2] = {lse[qrow], lse[qrow + 8]};
      uint32_t gk[SoftCap ? 10 : 1];  // SoftCap: 1 - t^2, packed halves, pair k = 2j + i
      wgmma_wait<1>();
      fence_regs(s);
#pragma unroll
      for (int j = 0; j < 5; ++j) {
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          float t[2];
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            float p;
            if constexpr (SoftCap) {
              t[e] = tanh_approx(s[4 * j + 2 * i + e] * args.softcap_scale);
              p = exp2_approx(fmaf(t[e], args.softcap_log2, -l[i]));
            } else {
              p = exp2_approx(fmaf(s[4 * j + 2 * i + e], args.scale_log2, -l[i]));
            }
            if constexpr (K != MaskKind::kVariant) {
              if (need_mask) {
                const int key = key0 + 8 * j + e;
                const int query = m0 + qrow + 8 * i;
                if (key >= args.seq_k || (Causal && key > query + args.seq_k - args.seq_q)) p = 0.f;
              }
            }
            s[4 * j + 2 * i + e] = p;
          }
          if constexpr (SoftCap) gk[2 * j + i] = pack2<__half>(fmaf(-t[0], t[0], 1.f), fmaf(-t[1], t[1], 1.f));
        }
      }
      uint32_t pk[10];
#pragma unroll
      for (int k = 0; k < 10; ++k) pk[k] = pack2<T>(s[2 * k], s[2 * k + 1]);
      // kVariant, masked step: the visibility of this thread's 20 entries (bit 4j + 2i + e), applied
      // to the packed P here and to the packed dS below.
      uint32_t vis = ~0u;
      if constexpr (K == MaskKind::kVariant) {
        if (need_mask) {
          vis = kv80_variant_visibility<Cfg>(smem, args, m0 + qrow, key0);
#pragma unroll
          for (int k = 0; k < 10; ++k) pk[k] &= kv80_keep(vis, k);
        }
      }
      kv80_store_transposed<Cfg>(pt, pk, c, warp, lane);
      const float d[2] = {delta[qrow], delta[qrow + 8]};
      wgmma_wait<0>();
      fence_regs(dp);
#pragma unroll
      for (int k = 0; k < 10; ++k) {
        const int i = k % 2;  // register pair k = (j, i) = (k / 2, k % 2)
        float d0 = s[2 * k] * (dp[2 * k] - d[i]);
        float d1 = s[2 * k + 1] * (dp[2 * k + 1] - d[i]);
        if constexpr (SoftCap) {
          const __half2 g = *reinterpret_cast<const __half2*>(&gk[k]);
          d0 *= __low2float(g);
          d1 *= __high2float(g);
        }
        pk[k] = pack2<T>(d0, d1);
        if (need_mask) {
          // Masked entries: dS = 0 by select (dP may hold an invisible row's NaN). kDense /
          // kCausal: where P is 0 (their mask zeroed it in the float loop); kVariant: by vis.
          if constexpr (K == MaskKind::kVariant) {
            pk[k] &= kv80_keep(vis, k);
          } else {
            d0 = s[2 * k] == 0.f ? 0.f : d0;
            d1 = s[2 * k + 1] == 0.f ? 0.f : d1;
            pk[k] = pack2<T>(d0, d1);
          }
        }
      }
      kv80_store_transposed<Cfg>(dst, pk, c, warp, lane);
      // Generic-proxy stores -> wgmma reads, across both warpgroups (each reads all 80 keys).
      fence_proxy_async_smem();
      named_barrier_sync(kBwdBarPds, kBwdConsumerThreads);

      // Group 1: dV^T (the last reader of dO(t)); group 2: dK^T and the first dQ^T piece.
      wgmma_fence();
      kv80_dkv<T, Cfg>(dv[0], do_tile, 2 * c, pt);
      kv80_dkv<T, Cfg>(dv[1], do_tile, 2 * c + 1, pt);
      wgmma_commit();
      float dq[32];
      kv80_dkv<T, Cfg>(dk[0], q_tile, 2 * c, dst);
      kv80_dkv<T, Cfg>(dk[1], q_tile, 2 * c + 1, dst);
      kv80_dq<T, Cfg>(dq, sK, 2 * c, dst);
      wgmma_commit();
      wgmma_wait<1>();
      fence_regs(dv[0]);
      fence_regs(dv[1]);
      // The lse / delta values of these stages were consumed (P^T, dS^T stored) before the P / dS
      // named barrier above, which the elected thread passed before either release.
      dO.release(kBwdReleaseEveryThread || elected);  // dO(t + 1) loads while the rest of the step runs
      wgmma_wait<0>();
      fence_regs(dk[0]);
      fence_regs(dk[1]);
      fence_regs(dq);
      q.release(kBwdReleaseEveryThread || elected);
      q.advance();
      dO.advance();

      int* dq_sem = args.deterministic
                        ? args.dq_sem + (int64_t(batch) * args.heads_q + head) * (args.seq_q_pad / 64) + m
                        : nullptr;
      int dq_rank = 0;
      if constexpr (K == MaskKind::kVariant) {
        if (dq_sem) dq_rank = bwd_dq_rank_variant<Cfg>(args, bwd_variant_mask<Cfg>(smem, args), n0 / Cfg::block_n(), m);
      } else {
        dq_rank = dq_sem ? bwd_dq_rank<Cfg, K>(args, n0 / Cfg::block_n(), m) : 0;
      }
      if (dq_sem) dq_tile_wait(dq_sem, dq_rank, dq_sem_thread);
      kv80_add_dq<Cfg>(dq_rows, dq, m0, 2 * c, tid);
      wgmma_fence();
      kv80_dq<T, Cfg>(dq, sK, 2 * c + 1, dst);
      wgmma_commit();
      wgmma_wait<0>();
      fence_regs(dq);
      kv80_add_dq<Cfg>(dq_rows, dq, m0, 2 * c + 1, tid);
      if (dq_sem) dq_tile_signal(dq_sem, dq_rank, dq_sem_thread);
    }
  }

  // Epilogue: both warpgroups are past their last wgmma (each step ends in wait<0>), so the rings
  // and buffers are free for the transposed dK / dV staging.
  named_barrier_sync(kBwdBarPds, kBwdConsumerThreads);
  kv80_stage_dkv<T, Cfg>(smem + Cfg::epi_dk_offset(), dk, args.softmax_scale, c, warp, lane);
  kv80_stage_dkv<T, Cfg>(smem + Cfg::epi_dv_offset(), dv, 1.f, c, warp, lane);
  named_barrier_sync(kBwdBarPds, kBwdConsumerThreads);
  const int ctid = c * 128 + tid;
  kv80_write_rows<Cfg>(args.dk, smem + Cfg::epi_dk_offset(), args, n0, kv_head, batch, ctid);
  kv80_write_rows<Cfg>(args.dv, smem + Cfg::epi_dv_offset(), args, n0, kv_head, batch, ctid);
}

template <class T, class Cfg, MaskKind K, bool SoftCap>
__global__ void __launch_bounds__(Cfg::threads(), 1)
    bwd_kernel_kv80(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                    const __grid_constant__ CUtensorMap tm_v, const __grid_constant__ CUtensorMap tm_do,
                    const BwdArgs args) {
  using QBarriers = typename StagedPipeline<Cfg::q_stages(), 1>::Barriers;
  using DoBarriers = typename StagedPipeline<Cfg::do_stages(), 1>::Barriers;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
  uint64_t* kv_full = reinterpret_cast<uint64_t*>(smem + Cfg::barrier_offset());
  auto* q_bars = reinterpret_cast<QBarriers*>(kv_full + 1);
  auto* do_bars = reinterpret_cast<DoBarriers*>(q_bars + 1);
  static_assert(sizeof(QBarriers) + sizeof(DoBarriers) + 8 == Cfg::barrier_bytes(), "barrier block size");

  int n_block, kv_head, batch;
  BwdGridScheduler<K>::tile(args, &n_block, &kv_head, &batch);
  const int n0 = n_block * Cfg::block_n();
  const int wg = __shfl_sync(0xffffffffu, int(threadIdx.x / 128), 0);

  if (threadIdx.x == 0) {
    tma_prefetch_map(&tm_q);
    tma_prefetch_map(&tm_k);
    tma_prefetch_map(&tm_v);
    tma_prefetch_map(&tm_do);
    mbarrier_init(kv_full, 1);
    StagedPipeline<Cfg::q_stages(), 1>::init(q_bars, Cfg::consumer_warpgroups() * kBwdReleasesPerWarpgroup);
    StagedPipeline<Cfg::do_stages(), 1>::init(do_bars, Cfg::consumer_warpgroups() * kBwdReleasesPerWarpgroup);
    fence_mbarrier_init();
  }
  __syncthreads();
  // A programmatic dependent of the preprocess (kernel.cuh): nothing global before this.
  grid_dependency_wait();
  grid_dependency_launch_dependents();

  if (wg == 0) {
    setmaxnreg_dec<bwd_producer_regs<Cfg, K>()>();
    // kVariant: the range by whole warps (the segment narrowing is warp-collective); the other
    // kinds compute it in the loader thread only, as before.
    int m_begin = 0, m_end = 0;
    if constexpr (K == MaskKind::kVariant) bwd_query_blocks<Cfg, K>(args, batch, n0, &m_begin, &m_end);
    if (threadIdx.x == 0) {
      if constexpr (K != MaskKind::kVariant) bwd_query_blocks<Cfg, K>(args, batch, n0, &m_begin, &m_end);
      if (m_end > m_begin) {
        bwd_load_tile<Cfg, Cfg::q_stages(), Cfg::do_stages()>(smem, kv_full, q_bars, do_bars, &tm_q, &tm_k, &tm_v,
                                                              &tm_do, args, n0, kv_head, batch, m_begin, m_end);
      }
    }
  } else {
    setmaxnreg_inc<Cfg::consumer_regs()>();
    TmaConsumerPipeline<T, typename Cfg::RowRing, false> q(q_bars, smem + Cfg::q_offset());
    TmaConsumerPipeline<T, typename Cfg::DoRing, false> dO(do_bars, smem + Cfg::do_offset());
    kv80_consumer<T, Cfg, K, SoftCap>(wg - 1, smem, kv_full, q, dO, args, n0, kv_head, batch);
  }
}

}  // namespace fa4::hopper
