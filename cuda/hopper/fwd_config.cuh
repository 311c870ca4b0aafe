// Forward-kernel tile configurations: one struct per head dim. Every tile size, stage count and
// register split lives here; the kernel reads them only through the named accessors of FwdTile.
#pragma once
#include <cstdint>

namespace fa4::hopper {

// The shape parameters of one configuration, and everything derived from them.
// WgSkip: each consumer warpgroup skips the key blocks that none of ITS 64 rows can see (causal;
// the tile's count comes from its last row) or all blocks when its rows are all past seq_q (the
// last query tile's spare rows, both masks), and masks only for its own rows; it still passes the
// issue token and releases the skipped K/V stages, so the barrier sequence is unchanged. Lpt (causal only): one linear grid in longest-first order over sections of (head,
// batch) pairs sized so a section's K/V fits in L2 (FwdArgs::lpt_section), instead of
// (m block, head, batch) with only the m blocks of one pair reversed. KWaitFirst: S = Q K^T
// waits for all K sub-stages before its first wgmma (see issue_qk; WgSkip needed it until session 7
// made n_mine warp-uniform).
// Persist: one CTA per SM looping over the tiles (persistent_tile: a static stride without a mask,
// where every tile has the same length; under a causal mask the Lpt order dealt boustrophedon --
// a variant's config turns Persist on for its causal instantiation only where it says so, V12 and
// V13; the older ones run the ordinary kernel there), O staged in its own shared buffer so the next tile's Q load (behind a Q-empty barrier) and K/V
// loads overlap this tile's last PV and epilogue (fwd_kernel_persistent). OInQ (with Persist, for
// tiles that leave no room for an O buffer): O staged in the Q buffer as in v2, so only the K/V
// loads overlap the epilogue; the next Q waits for every warpgroup's O store to have read it.
// CondRescale (fwd v5, FA4): a row's running max moves only when it grows by more than 2^8
// (kRescaleThresholdLog2, fwd_softmax.cuh); a warp skips the O *= scale multiply when none of its
// rows moved (__any_sync vote; per-row state, so exact). Exp2EmuEighths (fwd v5, FA4): that many of
// every 8 exp2s of P run as a polynomial on the FMA pipe (exp2_poly) instead of MUFU.EX2.
template <int HeadDim, int ConsumerWarpgroups, int BlockN, int KvStages, int QkStages,
          int ProducerRegs, int ConsumerRegs, bool WgSkip = false, bool Lpt = false,
          bool KWaitFirst = WgSkip, bool Persist = false, bool OInQ = false,
          bool CondRescale = false, int Exp2EmuEighths = 0, bool TrimFirst = false, bool PhaseClocks = false,
          bool TrimFirstPv = false, int QStages = 1>
struct FwdTile {
  // Rows of Q per consumer warpgroup: one wgmma m64 row block.
  static constexpr int rows_per_warpgroup() { return 64; }
  static constexpr int head_dim() { return HeadDim; }
  static constexpr int consumer_warpgroups() { return ConsumerWarpgroups; }
  static constexpr int block_m() { return 64 * ConsumerWarpgroups; }
  static constexpr int block_n() { return BlockN; }
  static constexpr int kv_stages() { return KvStages; }
  static constexpr int qk_stages() { return QkStages; }
  static constexpr int producer_regs() { return ProducerRegs; }
  static constexpr int consumer_regs() { return ConsumerRegs; }
  static constexpr bool wg_skip() { return WgSkip; }
  static constexpr bool lpt() { return Lpt; }
  static constexpr bool k_wait_first() { return KWaitFirst; }
  static constexpr bool persist() { return Persist; }
  static constexpr bool o_in_q() { return OInQ; }
  static constexpr bool cond_rescale() { return CondRescale; }
  static constexpr int exp2_emu_eighths() { return Exp2EmuEighths; }
  // TrimFirst (fwd v7): a tile's first key block (the loop runs from the last block down, so the
  // partial one: the diagonal under a causal mask, the seq_k tail without one) is multiplied only
  // over the 16-column groups this warpgroup's rows can see: S = Q K^T with a narrower wgmma N (its
  // accumulator registers are a prefix of the full N's) and its PV with fewer k-steps. The other
  // columns are masked to -inf as before, so the result is the same.
  static constexpr bool trim_first() { return TrimFirst; }
  // PhaseClocks (harness-only instrumentation, fwd_phase_clock.cuh): the consumer sums its cycles per
  // phase (issue-turn wait, issue, S wait, softmax, PV wait, epilogue, Q wait).
  static constexpr bool phase_clocks() { return PhaseClocks; }
  // TrimFirstPv (fwd v13, with TrimFirst): the first block's PV also runs only its visible 16-key
  // groups (the loop's first step peeled into the width switch).
  static constexpr bool trim_first_pv() { return TrimFirstPv; }
  // QStages (persistent kernel with an O buffer): Q buffers. With 2 the producer loads the next
  // tile's Q into the other buffer as soon as the tile before released it, a whole tile ahead.
  static constexpr int q_stages() { return QStages; }
  // One producer warpgroup (a single warp issues TMA; the rest only give registers back).
  static constexpr int threads() { return 128 * (1 + ConsumerWarpgroups); }
  // TMA boxes and 128B-swizzle atoms are 64 two-byte columns wide.
  static constexpr int chunks() { return HeadDim / 64; }
  static constexpr int chunks_per_qk_stage() { return chunks() / QkStages; }
  // Shared-memory bytes of the tiles (2-byte elements).
  static constexpr uint32_t q_bytes() { return uint32_t(block_m()) * HeadDim * 2; }
  static constexpr uint32_t kv_tile_bytes() { return uint32_t(BlockN) * HeadDim * 2; }
  static constexpr uint32_t chunk_bytes_q() { return uint32_t(block_m()) * 128; }
  static constexpr uint32_t chunk_bytes_kv() { return uint32_t(BlockN) * 128; }
  static constexpr uint32_t q_offset() { return 0; }
  static constexpr uint32_t k_offset() { return QStages * q_bytes(); }
  static constexpr uint32_t v_offset() { return k_offset() + KvStages * kv_tile_bytes(); }
  // Persist: O's staging buffer (laid out like Q), then one more barrier per Q buffer (Q-empty).
  static constexpr uint32_t o_offset() { return v_offset() + KvStages * kv_tile_bytes(); }
  static constexpr uint32_t o_bytes() { return Persist && !OInQ ? q_bytes() : 0; }
  static constexpr uint32_t barrier_offset() { return o_offset() + o_bytes(); }
  static constexpr uint32_t barrier_bytes() {
    return 8 * (QStages + KvStages * (QkStages + 1) + 2 * KvStages + (Persist ? QStages : 0));
  }
  // +1024: the dynamic smem base is only 16-byte aligned, swizzle atoms need 1024.
  static constexpr uint32_t smem_bytes() { return barrier_offset() + barrier_bytes() + 1024; }

  static_assert(HeadDim % 64 == 0, "head dim must be a multiple of the 64-column swizzle width");
  static_assert(chunks() % QkStages == 0, "K sub-stages must split the head dim into whole chunks");
  static_assert(BlockN % 16 == 0 && BlockN >= 64 && BlockN <= 256, "wgmma N and PV k-steps");
  static_assert(ProducerRegs + ConsumerWarpgroups * ConsumerRegs <= 512 && ProducerRegs % 8 == 0 &&
                    ConsumerRegs % 8 == 0,
                "register split must fit 64K registers per SM (in units of 128 threads)");
  static_assert(smem_bytes() <= 232448, "shared memory per block is at most 227 KB");

  static_assert(Persist || !OInQ, "OInQ is a layout of the persistent kernel");
  static_assert(QStages == 1 || (QStages == 2 && Persist && !OInQ), "two Q buffers: the persistent kernel with an O buffer");
  static_assert(!TrimFirstPv || (TrimFirst && !Persist), "TrimFirstPv extends TrimFirst in the plain kernel");
  static_assert(!PhaseClocks || (!TrimFirst && !WgSkip), "PhaseClocks instruments the plain consumers (no first-block trim / skip)");
  static_assert(Exp2EmuEighths >= 0 && Exp2EmuEighths <= 8, "emulated exp2 fraction in eighths");
};

#if defined(__CUDACC__)
#define FA4_FWD_HOST_DEVICE __host__ __device__
#define FA4_FWD_HOST_DEVICE_INLINE __host__ __device__ __forceinline__
#else
#define FA4_FWD_HOST_DEVICE
#define FA4_FWD_HOST_DEVICE_INLINE inline
#endif

// Lpt grid order (causal): tile t of the linear grid -> (m block, head, batch). Sections of
// `section` (head, batch) pairs, pair = batch * heads + head, the last section possibly shorter;
// inside a section all pairs' last (longest) m block first, then the next one down. A bijection
// of [0, m_blocks * heads * batch) (the standalone harness checks it on the host).
struct FwdTileCoord {
  int m_block, head, batch;
};
FA4_FWD_HOST_DEVICE inline FwdTileCoord lpt_tile_coord(int t, int m_blocks, int heads, int batch, int section) {
  const int pairs = heads * batch;
  const int per_section = section * m_blocks;
  const int sec = t / per_section;
  const int within = t - sec * per_section;
  const int in_section = pairs - sec * section < section ? pairs - sec * section : section;
  const int pair = sec * section + within % in_section;
  return {m_blocks - 1 - within / in_section, pair % heads, pair / heads};
}

// int min for host and device code: CUDA's min on the device, a comparison on the host (this
// header stays plain C++ for the extension and the CPU tests).
FA4_FWD_HOST_DEVICE_INLINE int fwd_min(int a, int b) {
#if defined(__CUDA_ARCH__)
  return min(a, b);
#else
  return a < b ? a : b;
#endif
}

// Key blocks (from block 0) that query rows [m0, m0 + block_m) need; 0 if they see none. Causal
// is bottom-right aligned: query i sees keys j <= i + seq_k - seq_q.
template <bool Causal>
FA4_FWD_HOST_DEVICE_INLINE int fwd_tile_key_blocks(int m0, int block_m, int block_n, int seq_q, int seq_k) {
  const int total = (seq_k + block_n - 1) / block_n;
  if (!Causal) return total;
  const int last_row = fwd_min(m0 + block_m, seq_q) - 1;
  const int max_col = last_row + seq_k - seq_q;
  if (max_col < 0) return 0;
  return fwd_min(total, max_col / block_n + 1);
}

// The persistent kernel's deal: the linear tile index a CTA b of g runs in its round r. Under a
// causal mask odd rounds go backwards (boustrophedon), so with longest-first tiles every CTA's sum
// of tile lengths stays within about one tile of the others'.
FA4_FWD_HOST_DEVICE_INLINE int persistent_deal_index(int r, int g, int b, bool causal) {
  return r * g + (causal && (r & 1) ? g - 1 - b : b);
}

// Kernel variants (fwd v4 candidates, NOTES.md). The library (fwd_hd*.cu) builds
// fwd_default_variant(head_dim) for bf16 and fp16; the standalone harness also builds the others
// (bf16 only, tests/gpu/cuda/fwd_variants_hd*.cu) and checks and times them side by side.
//   hd64:  0 = 3 WG 192x128 (v2)   1 = 2 WG 128x128 (v1)   2 = 0 + WgSkip + Lpt   3 = 0 + WgSkip
//          4 = 0 + Lpt   5 = 0 + KWaitFirst   6 = 0 + Persist (non-causal)
//          7 = 0 + WgSkip + Persist (non-causal) / Lpt (causal): V2 under a mask, V6 + WgSkip without
//   hd128: 0 = 128x176 / causal 128x128 (v2)   1 = 128x128 both   2 = 128x192 non-causal (causal
//          as 0)   3 = 0 + Lpt   4 = 3 WG 192x80 (registers 24/160; + WgSkip without the mask:
//          with it the causal kernel spilled 4 bytes)   5 = 0 + KWaitFirst
//          6 = 128x128 + Persist (non-causal; causal as 0)   7 = 0 + Persist + OInQ (128x176,
//          non-causal; causal as 0)   8 = 128x160 + Persist with an O buffer (non-causal; 226 KB of
//          shared memory; causal as 0)
//          fwd v5 (FA4 softmax tricks, all on variant 0's tile):
//          8 = 0 + CondRescale   9 = 0 + Exp2Emu 1/4   10 = 0 + both (1/4)   11 = 0 + both (1/8)
//   hd128: fwd v5 on variant 0's tile: 9 = 0 + CondRescale   10 = 0 + Exp2Emu 1/4
//          11 = 0 + both (1/4)   12 = 0 + both (1/8)
//   fwd v6 (persistent under a causal mask too: Lpt order dealt boustrophedon, persistent_tile):
//   hd64:  12 = 0 + Persist (both masks; = V6 without a mask)
//   hd128: 13 = 0 + Persist (causal 128x128 with an O buffer; without a mask = V7, OInQ)
//   hd256: 0 = 128x80 (v2)   1 = 0 + WgSkip + Lpt   2 = 128x64   3 = 0 + KWaitFirst
//          4 = 0 + Persist + OInQ (non-causal; causal as 0)
//   fwd v7 (TrimFirst: the first, partial key block multiplied over its visible columns only):
//   hd64:  13 = 12 + TrimFirst (both masks)   hd128: 14 = 0 + TrimFirst   hd256: 5 = 0 + TrimFirst
//          (hd128 / hd256: without a mask only; causal as 0)
//   session 6 (fwd v8 / v9, measured and dropped: NOTES.md): V12 + 3 K/V stages, + 2 Q buffers, 2 WG
//          128x128 persistent, 64-key blocks, the inter-tile overlap (commits d4d636d, 507d8f5)
//   hd64:  14 = 12 + PhaseClocks (harness instrumentation: where a persistent warpgroup's cycles go)
//   hd128: 15 = 0 + PhaseClocks (the same for the plain kernel; V14's tile without TrimFirst)
//   fwd v10 (SoftmaxChains 4: the block's row max / sum in 4 partial chains; session 7: -0.5 to
//   -4.5%, removed; commit 92a1203 has it): hd64 15, hd128 16, hd256 6 are retired numbers
//   (fwd_variant_retired), so the later variants keep theirs.
//   fwd v11 (session 7; the persistent kernel skipping, per warpgroup, the causal diagonal's key
//   blocks none of its 64 rows see -- warpgroup_block_count / pass_skipped_blocks, as the plain
//   kernel's WgSkip):   hd64:  16 = 12 + WgSkip under the causal mask (without it: V12's kernel)
//   fwd v13 (TrimFirstPv: the first, partial block's PV over its visible keys only; the defaults
//   since session 8):   hd128: 17 = 14 + TrimFirstPv   hd256: 7 = 5 + TrimFirstPv   (without a
//   mask; causal as V0)
//   hd128: 18 = 13 + PhaseClocks (instrumentation: where the persistent kernel's cycles go)
//   hd256: 8 = 0 + WgSkip under the causal mask, without KWaitFirst (without the mask: V5)
//   session 8: hd128 19 = 7 + TrimFirst, 20 = 19 + TrimFirstPv (the persistent OInQ kernel with the
//   first-block trims): -0.8 / -1.8% at 2k, -2 / -3.4% at 4k against V17; retired numbers (commit
//   fcc5968 has them).
//   hd128: 21 = 6 + PhaseClocks, 22 = 8 + PhaseClocks (instrumentation: do the persistent kernels
//   with their own O buffer hide the Q wait and the store that OInQ (V18) cannot?)
//   hd128: 23 = 6 + 2 Q buffers (the next tile's Q a whole tile ahead; 193 KB, cuDNN's kernel uses
//   232 KB with 128-key blocks)   24 = 23 + PhaseClocks
//   session 9 (the persistent causal order in L2-sized sections, fwd_schedule.h):
//   hd128: 25 = the persistent 128x128 kernel with its own O buffer under both masks (V6 without the
//   mask, V13's causal kernel under it)
//   hd256: 9 = 7 + Lpt under the mask (the plain grid dispatches each pair's tiles longest first,
//   but pair after pair, so its last wave still holds long tiles; a host model of hd256 causal 2k
//   puts the busiest SM 13% above the mean, 2% with the Lpt grid)
//   hd256: 10 = V4 (persistent, O staged in Q) + TrimFirst without the mask, V9's kernel under it
//   (a candidate for the non-causal 2k cell; prepared in session 9, not yet run)
// (Lpt acts under a causal mask only, Persist without one (the other instantiation is variant
// 0's kernel); WgSkip under both, but without a mask only on the last query tile's spare rows.)
// fwd v7 (session 5): TrimFirst without a mask at hd128 (V14) and hd256 (V5): +1.5% kernel-only at
// seq 2048 (hd128 also 4096), neutral at 16384; their causal instantiations are V0's kernel
// (TrimFirst under the mask measured -2 to -3.5% at every length: the first-block switch cost
// the main loop instructions).
// fwd v13 (session 8): TrimFirstPv on top, the first block's PV trimmed as well, kernel-only
// palindromic: hd128 non-causal 2k +1.9% (4k, 16k within noise), hd256 +4.2% / +4.5% at 2k / 4k.
// Session 9: hd256 V9 (V7 + the Lpt grid under the mask), kernel-only palindromic over V7: causal
// +8.0 / +10.5 / +8.2% at 2k / 4k / 8k; without the mask the same kernel as V7.
constexpr int fwd_default_variant(int head_dim) { return head_dim == 128 ? 17 : head_dim == 256 ? 9 : 0; }
// fwd v6: the persistent kernel where overlapping one tile's epilogue with the next tile's loads
// pays, i.e. on short tiles. Measured at hd64 (session 3, kernel-only, drift-cancelled): V12 +7-8%
// at seq 2048 with and without the mask, +3-7% causal at 4096, but -1 to -7% at 8192 and above;
// at hd128 (V13) no gain. The library runs fwd_short_seq_variant(head_dim) (< 0: none) when
// seq_k <= fwd_short_seq_max_k(head_dim, causal), else fwd_default_variant(head_dim); both are
// built for bf16 and fp16.
// Session 7: V16 (V12 + per-warpgroup causal block skipping; without the mask V12 itself), kernel-
// only palindromic: causal +8.3% at 2048, +5.5% at 4096 over V12 (a +-1% wash without the mask when
// the skip also ran there, so it does not).
// Session 9: with the persistent causal order in L2-sized sections (fwd_schedule.h), hd128 V25
// (persistent 128x128, O buffer) kernel-only over the default: causal +12.8% at 2048, +10.4% at
// 4096 (V13's kernel); without the mask +2.4% at 2048 (calls 1-3: +1.4 to +2.4%) but -2.0% at 4096.
constexpr int fwd_short_seq_variant(int head_dim) { return head_dim == 64 ? 16 : head_dim == 128 ? 25 : -1; }
// The most keys for which the library runs fwd_short_seq_variant (0: never).
constexpr long long fwd_short_seq_max_k(int head_dim, bool causal) {
  return head_dim == 64 ? 4096 : head_dim == 128 ? (causal ? 4096 : 2048) : 0;
}
constexpr int fwd_variant_count(int head_dim) { return head_dim == 64 ? 17 : head_dim == 128 ? 26 : 11; }
// Variant numbers of removed experiments (not built; the numbers after them are kept).
constexpr bool fwd_variant_retired(int head_dim, int v) {
  return (head_dim == 64 && v == 15) || (head_dim == 128 && (v == 16 || v == 19 || v == 20)) ||
         (head_dim == 256 && v == 6);
}

template <int HeadDim, bool Causal, int Variant = fwd_default_variant(HeadDim)>
struct FwdConfig;

// hd64: exp-bound (MUFU takes as long as the MMAs), so a third consumer warpgroup (FA3's 192-row
// tile) gives the tensor cores another warpgroup's MMAs to run while two do their softmax.
// O is only 32 registers per thread, so 160 per consumer is enough.
template <bool Causal, int V>
struct FwdConfig<64, Causal, V>
    : FwdTile</*HeadDim=*/64, /*ConsumerWarpgroups=*/V == 1 ? 2 : 3, /*BlockN=*/128, /*KvStages=*/2,
              /*QkStages=*/1, /*ProducerRegs=*/V == 1 ? 24 : 32, /*ConsumerRegs=*/V == 1 ? 240 : 160,
              /*WgSkip=*/V == 2 || V == 3 || V == 7 || (V == 16 && Causal), /*Lpt=*/V == 2 || V == 4 || V == 7,
              /*KWaitFirst=*/V == 2 || V == 3 || V == 5 || V == 7 || (V == 16 && Causal),
              /*Persist=*/((V == 6 || V == 7) && !Causal) || (V >= 12 && V <= 16),
              /*OInQ=*/false, /*CondRescale=*/V == 8 || V == 10 || V == 11,
              /*Exp2EmuEighths=*/V == 9 || V == 10 ? 2 : V == 11 ? 1 : 0, /*TrimFirst=*/V == 13,
              /*PhaseClocks=*/V == 14> {
  static_assert(V >= 0 && V <= 16, "hd64 variants are 0..16");
};

// hd128: FA3's tiles, 128x128 causal and a longer 128x176 K tile without the mask.
template <bool Causal, int V>
struct FwdConfig<128, Causal, V>
    : FwdTile<128, V == 4 ? 3 : 2,
              V == 4 ? 80 : (Causal || V == 1 || V == 6 || V == 21 || V == 23 || V == 24 || V == 25) ? 128 : V == 2 ? 192
                  : (V == 8 || V == 22) ? 160 : 176, 2,
              /*QkStages=*/2, 24, V == 4 ? 160 : 240, /*WgSkip=*/V == 4 && !Causal, /*Lpt=*/V == 3,
              /*KWaitFirst=*/V == 4 || V == 5,
              /*Persist=*/((V == 6 || V == 7 || V == 8 || (V >= 21 && V <= 24)) && !Causal) || V == 13 || V == 18 ||
                  V == 25,
              /*OInQ=*/(V == 7 || V == 13 || V == 18) && !Causal,
              /*CondRescale=*/V == 9 || V == 11 || V == 12, /*Exp2EmuEighths=*/V == 10 || V == 11 ? 2 : V == 12 ? 1 : 0,
              /*TrimFirst=*/(V == 14 || V == 16 || V == 17) && !Causal,
              /*PhaseClocks=*/V == 15 || V == 18 || V == 21 || V == 22 || V == 24, /*TrimFirstPv=*/V == 17 && !Causal,
              /*QStages=*/(V == 23 || V == 24) && !Causal ? 2 : 1> {
  static_assert(V >= 0 && V <= 25, "hd128 variants are 0..25");
};

// hd256: O alone takes 128 registers per thread, so the K tile is short (80 rows).
template <bool Causal, int V>
struct FwdConfig<256, Causal, V>
    : FwdTile<256, 2, V == 2 ? 64 : 80, 2, /*QkStages=*/2, 24, 240, /*WgSkip=*/V == 1 || (V == 8 && Causal),
              /*Lpt=*/V == 1 || ((V == 9 || V == 10) && Causal),
              /*KWaitFirst=*/V == 1 || V == 3, /*Persist=*/(V == 4 || V == 10) && !Causal,
              /*OInQ=*/(V == 4 || V == 10) && !Causal,
              /*CondRescale=*/false, /*Exp2EmuEighths=*/0,
              /*TrimFirst=*/(V >= 5 && V <= 10) && !Causal,
              /*PhaseClocks=*/false, /*TrimFirstPv=*/(V == 7 || V == 9) && !Causal> {
  static_assert(V >= 0 && V <= 10, "hd256 variants are 0..10");
};

}  // namespace fa4::hopper
