// Backward-kernel tile configurations: one struct per head dim. Every tile size, stage count and
// register split of the backward lives here; the kernel reads them only through BwdTile's names.
//
// One CTA owns block_n() keys (rows of K and V) of one kv head and loops over the q tiles
// (block_m() rows) of every q head of its GQA group. Two consumer warpgroups share the work:
//   S^T = K Q^T and dP^T = dO-side twins: the block_n x block_m tile is cut into row_groups()
//     groups of 64 key rows times col_splits() slices of s_cols() query columns, one per
//     warpgroup (row_groups() * col_splits() == 2).
//   dV += P^T dO and dK += dS^T Q: warpgroup (r, s) owns key rows [64r, 64r + 64) and head-dim
//     columns [s * dkv_cols(), (s + 1) * dkv_cols()). With col_splits() == 1 each warpgroup holds
//     the whole P^T / dS^T rows it needs in registers (the RS wgmma); otherwise P^T and dS^T go
//     through shared memory (the SS wgmma).
//   dQ = dS K: the block_m x head_dim tile is cut into dq_row_slices() x dq_col_slices() pieces
//     of 64 x dq_cols(), one per warpgroup, added to a float32 accumulator in global memory.
//
// Variants (bwd v2/v3/v4, NOTES.md), compile-time flags; variant number = bit 0 PipelineScores +
// bit 1 DqViaTma + bit 2 DqInRing + bit 3 Persistent + bit 4 SplitSdP + bit 5 ScoresAhead
// (BwdConfig<HeadDim, Variant>):
//   PipelineScores: step t+1's S^T = K Q^T is issued right after step t's dQ wgmma, before the
//     dQ wait and the dQ adds, and dP^T of t+1 right after the adds, so the tensor cores have
//     queued work while the consumers add dQ (v1 issued both only at the top of the next step).
//   DqViaTma: the consumers write their dQ piece to a float32 shared-memory tile (in accumulator
//     fragment order, conflict-free) and warp 1 of the producer warpgroup adds the whole tile to
//     dq_accum with one 1-D bulk reduce-add (cp.reduce.async.bulk .add.f32) per step; dq_accum
//     then holds each block_m x head_dim tile in that fragment order (dq_accum_offset) and the
//     postprocess reads it so. Not at hd256 (no shared memory left for a 64 KB tile).
//   DqInRing (hd256 only, with the v1 schedule): DqViaTma's bulk reduce-add without a dQ tile of
//     its own. After the P^T/dS^T barrier of step t, warpgroup c reads only head-dim half c of
//     Q(t) (its dK) and of dO(t) (its dV); once its dK/dV/dQ wgmmas retired it writes its 64 x 128
//     float32 dQ piece (32 KB, fragment order) into those two halves (16 KB + 16 KB), and the
//     writer warp bulk-adds them and then frees the ring stage itself (ring_empty_arrivals() = 1).
//     dq_accum gets the same fragment-order tiles as DqViaTma (dq_frag_layout()).
#pragma once
#include <cstdint>

namespace fa4::hopper {

template <int HeadDim, int BlockM, int BlockN, int ProducerRegs, int ConsumerRegs, int DqPieces = 1,
          bool PipelineScores = false, bool DqViaTma = false, bool DqInRing = false, bool Persistent = false,
          bool SplitSdP = false, bool ScoresAhead = false, bool WriterTiming = false, bool DetRingWriter = false,
          bool StsmPds = false, bool UniformWarpgroup = false, bool RedV4 = false>
struct BwdTile {
  // RedV4 (harness-only measurement, hd256 variant 1024 = V0 + it): the consumers' red.global dQ
  // adds are 16 bytes each (red.global.add.v4.f32: a thread's 4 accumulators of one 8-column group,
  // rows r and r + 8) into a fragment-order dq_accum tile (dq_frag_offset), half the instructions
  // of V0's 8-byte adds; a warp's adds cover 512 contiguous bytes. Asks whether per-thread atomics
  // can feed the L2 as well as the bulk reduce (FA3 runs hd256 with atomics).
  static constexpr bool red_v4() { return RedV4; }
  // The 80-key hd256 kernel (bwd_kv80.cuh, variant 4096) has its own config; these say "not it".
  static constexpr bool kv80() { return false; }
  static constexpr bool dq_transposed() { return false; }
  // UniformWarpgroup (hd64 / hd128 variant 35 = V3 + 32; with StsmPds variant 51, the library
  // default there since session 4): the kernel's warpgroup index comes through __shfl_sync from
  // lane 0, which the compiler knows is warp-uniform, so the wgmma descriptors and shared-memory
  // bases derived from it can live in uniform registers (V3's consumer loop converts 48 of them
  // with R2UR per step).
  static constexpr bool uniform_warpgroup() { return UniformWarpgroup; }
  // StsmPds (hd64 / hd128 variant 19 = V3 + 16; in the library's V51): store_pds writes the
  // P^T / dS^T fragments with stmatrix (4 x 8 x 8 b16 per instruction: a quarter of the shared
  // stores and their address arithmetic); the bytes in shared memory are the same.
  static constexpr bool stsm_pds() { return StsmPds; }
  // DetRingWriter (harness-only until measured: variant 132 = V4 + 128; SplitSdP variants always):
  // the DqInRing writer warp is also built in its deterministic form (semaphore handshake) and
  // args.deterministic picks it at run time. Off in the library's V4, whose deterministic mode runs
  // bwd_deterministic_variant(256) = V0, so the shipped V4 kernel is the one tested on the H200.
  static constexpr bool det_ring_writer() { return DetRingWriter; }
  // WriterTiming (harness-only instrumentation, variant 68 = V4 + 64): the DqInRing writer warp
  // adds its clock64 cycles spent waiting for the consumers (ring barrier), waiting for the bulk
  // engine (wait_group.read) and in total to a per-translation-unit counter
  // (g_bwd_writer_clocks), which the harness reads after timing it.
  static constexpr bool writer_timing() { return WriterTiming; }
  // ScoresAhead (bwd v4 candidate, with SplitSdP): the next step's S^T / dP^T chain is issued as
  // soon as this step's dK/dQ group is issued, and runs while this step's dQ piece is staged in
  // the ring (retired before the loop's back edge, so no wgmma group is in flight across it).
  static constexpr bool scores_ahead() { return ScoresAhead; }
  // SplitSdP (bwd v4 candidate, hd256 with DqInRing): the two consumer warpgroups split the score
  // products by KIND instead of by query columns: warpgroup 0 computes S^T = K Q^T over all
  // block_m query columns (one m64n64 wgmma chain instead of two m64n32 ones, so K is read from
  // shared memory once per step instead of twice) and P^T, warpgroup 1 dP^T = V dO^T and, after
  // reading P^T back from shared memory (named barrier kBwdBarPReady), dS^T. The dK/dV/dQ
  // ownership (head-dim halves) and the DqInRing dQ path are V4's.
  static constexpr bool split_sdp() { return SplitSdP; }
  // Persistent (bwd v3): one CTA per SM loops over (key block, kv head, batch) tiles taken from a
  // global counter (bwd_kernel_persistent); the next tile's K/V loads overlap this tile's dK/dV
  // stores, the Q/dO ring and the dQ handshakes run on across tiles.
  static constexpr bool persistent() { return Persistent; }
  static constexpr bool pipeline_scores() { return PipelineScores; }
  static constexpr bool dq_via_tma() { return DqViaTma; }
  // DqInRing (bwd v3, hd256): the dQ piece of warpgroup c is staged in the parts of this step's Q
  // and dO ring stages that only c still reads (bwd_config.cuh header), and the writer warp frees
  // the ring stage after its bulk reduce-add has read it.
  static constexpr bool dq_in_ring() { return DqInRing; }
  // dq_accum holds each block_m-row tile in accumulator fragment order (dq_accum_offset).
  static constexpr bool dq_frag_layout() { return DqViaTma || DqInRing || RedV4; }
  static constexpr int head_dim() { return HeadDim; }
  static constexpr int block_m() { return BlockM; }  // query rows per main-loop step
  static constexpr int block_n() { return BlockN; }  // key rows per CTA
  static constexpr int consumer_warpgroups() { return 2; }
  static constexpr int threads() { return 128 * (1 + consumer_warpgroups()); }
  static constexpr int producer_regs() { return ProducerRegs; }
  static constexpr int consumer_regs() { return ConsumerRegs; }
  // Q/dO (with lse/delta) ring depth; P/dS double-buffered so one barrier per step suffices.
  static constexpr int q_stages() { return 2; }
  static constexpr int pds_stages() { return 2; }

  static constexpr int row_groups() { return BlockN / 64; }
  static constexpr int col_splits() { return consumer_warpgroups() / row_groups(); }
  static constexpr int s_cols() { return BlockM / col_splits(); }
  static constexpr int dkv_cols() { return HeadDim / col_splits(); }
  static constexpr bool pds_in_registers() { return col_splits() == 1; }
  static constexpr int dq_row_slices() { return BlockM / 64; }
  static constexpr int dq_col_slices() { return consumer_warpgroups() / dq_row_slices(); }
  static constexpr int dq_cols() { return HeadDim / dq_col_slices(); }
  // dQ computed and added in this many column pieces one after the other (fewer live registers).
  static constexpr int dq_pieces() { return DqPieces; }

  // TMA boxes and 128B-swizzle rows are 64 two-byte columns wide: a tile is stored as chunks of
  // 64 columns, each chunk rows x 128 bytes.
  static constexpr int chunks() { return HeadDim / 64; }
  static constexpr uint32_t chunk_bytes_q() { return uint32_t(BlockM) * 128; }   // Q, dO
  static constexpr uint32_t chunk_bytes_kv() { return uint32_t(BlockN) * 128; }  // K, V, P^T, dS^T
  static constexpr uint32_t q_tile_bytes() { return uint32_t(BlockM) * HeadDim * 2; }
  static constexpr uint32_t kv_tile_bytes() { return uint32_t(BlockN) * HeadDim * 2; }
  // P^T / dS^T: block_n key rows x block_m query columns, in chunks of 64 query columns.
  static constexpr uint32_t pds_tile_bytes() { return uint32_t(BlockN) * BlockM * 2; }
  static constexpr uint32_t vec_bytes() { return uint32_t(BlockM) * 4; }  // lse or delta of a tile

  static constexpr uint32_t k_offset() { return 0; }
  static constexpr uint32_t v_offset() { return k_offset() + kv_tile_bytes(); }
  static constexpr uint32_t q_offset() { return v_offset() + kv_tile_bytes(); }
  static constexpr uint32_t do_offset() { return q_offset() + q_stages() * q_tile_bytes(); }
  static constexpr uint32_t ds_offset() { return do_offset() + q_stages() * q_tile_bytes(); }
  static constexpr uint32_t p_offset() { return ds_offset() + pds_stages() * pds_tile_bytes(); }
  static constexpr uint32_t dq_offset() {
    return p_offset() + (pds_in_registers() ? 0 : pds_stages() * pds_tile_bytes());
  }
  // DqViaTma: one float32 block_m x head_dim dQ tile, in dq_accum's fragment order.
  static constexpr uint32_t dq_tile_bytes() { return uint32_t(BlockM) * HeadDim * 4; }
  static constexpr uint32_t lse_offset() { return dq_offset() + (DqViaTma ? dq_tile_bytes() : 0); }
  static constexpr uint32_t delta_offset() { return lse_offset() + q_stages() * vec_bytes(); }
  static constexpr uint32_t barrier_offset() { return delta_offset() + q_stages() * vec_bytes(); }
  // kv_full, then the Q ring's full[q_stages][1] + empty[q_stages], then the dO ring's.
  static constexpr uint32_t barrier_bytes() { return 8 * (1 + 2 * (2 * q_stages())) + (Persistent ? 48 : 0); }
  // Persistent: after the ring barriers, kv_empty (8 B), tile_full[2], tile_empty[2] (16 B each),
  // tile ids int[2] (8 B).
  static constexpr uint32_t persistent_offset() { return barrier_offset() + 8 * (1 + 2 * (2 * q_stages())); }
  // Arrivals that free a Q / dO ring stage: one elected thread per consumer warpgroup, or
  // (DqInRing) lane 0 of the dQ writer warp once its bulk reduce-add has read the stage.
  static constexpr uint32_t ring_empty_arrivals() { return DqInRing ? 1 : consumer_warpgroups(); }
  // DqInRing: bytes of warpgroup c's region in one Q (or dO) stage: head-dim chunks
  // [c * chunks() / 2, (c + 1) * chunks() / 2), the Q columns its dK (dO: its dV) reads.
  static constexpr uint32_t ring_region_bytes() { return q_tile_bytes() / col_splits(); }
  // +1024: the dynamic smem base is only 16-byte aligned, swizzle atoms need 1024.
  static constexpr uint32_t smem_bytes() { return barrier_offset() + barrier_bytes() + 1024; }

  // Adapter so the forward's TmaConsumerPipeline<T, Cfg, /*IsK=*/false> can drive the Q and dO
  // rings: its "kv" tile is our q tile.
  struct RowRing {
    static constexpr int kv_stages() { return q_stages(); }
    static constexpr int qk_stages() { return 1; }
    static constexpr int chunks() { return HeadDim / 64; }
    static constexpr uint32_t kv_tile_bytes() { return uint32_t(BlockM) * HeadDim * 2; }
    static constexpr uint32_t chunk_bytes_kv() { return uint32_t(BlockM) * 128; }
  };

  static_assert(HeadDim % 64 == 0, "head dim must be a multiple of the 64-column swizzle width");
  static_assert(BlockN == 64 || BlockN == 128, "64 key rows per warpgroup, 1 or 2 row groups");
  static_assert(BlockM == 64 || BlockM == 128, "dQ is cut into 64-row wgmma tiles");
  static_assert(s_cols() % 16 == 0 && s_cols() >= 32, "S^T slice width must be a wgmma N");
  static_assert(dq_cols() % (64 * DqPieces) == 0 && dkv_cols() % 64 == 0, "whole 64-column chunks");
  static_assert(ProducerRegs + consumer_warpgroups() * ConsumerRegs <= 512 && ProducerRegs % 8 == 0 &&
                    ConsumerRegs % 8 == 0,
                "register split must fit 64K registers per SM (in units of 128 threads)");
  static_assert(smem_bytes() <= 232448, "shared memory per block is at most 227 KB");
  static_assert(!DqViaTma || DqPieces == 1, "the dQ tile is staged in one piece per warpgroup");
  static_assert(!DqViaTma || (dq_offset() % 1024 == 0 && dq_tile_bytes() % 16 == 0), "bulk copy alignment");
  // DqInRing needs the hd256 ownership: both warpgroups on the same 64 keys (row_groups 1), each
  // owning half the head dim for dK, dV and dQ alike, so after the step's P^T/dS^T barrier
  // warpgroup c is the only reader of its half of Q(t) and dO(t); its 64 x dq_cols float32 dQ
  // piece is exactly those two halves (2 x 16 KB at hd256). v1 schedule only (the pipelined one
  // has S^T(t+1) and the stage release in other places). DqPieces == 2 (the persistent variant 12,
  // for registers): the first 64 dQ columns go to the Q half, then the second are computed and go
  // to the dO half.
  static_assert(!DqInRing || (row_groups() == 1 && col_splits() == 2 && dq_row_slices() == 1 &&
                              dq_cols() == dkv_cols() && (DqPieces == 1 || DqPieces == 2) && !DqViaTma &&
                              !PipelineScores && 64u * dq_cols() * 4 == 2 * ring_region_bytes() &&
                              ring_region_bytes() % 1024 == 0),
                "DqInRing: hd256-style split, v1 schedule, dQ piece = Q half + dO half (2 pieces: one each)");
  static_assert(!SplitSdP || ((DqInRing || RedV4) && !Persistent && DqPieces == 1 && BlockM == 64 &&
                               row_groups() == 1),
                "SplitSdP: V4's shape (hd256, 64 x 64, DqInRing or RedV4, one dQ piece), m64n64 score products");
  static_assert(!RedV4 || (!DqInRing && !DqViaTma && DqPieces == 1), "RedV4: the consumers add dQ themselves");
  static_assert(!ScoresAhead || SplitSdP, "ScoresAhead is a SplitSdP schedule");
  static_assert(!WriterTiming || (DqInRing && !Persistent), "WriterTiming instruments the DqInRing writer");

  // DqViaTma: float offset inside dq_accum's block_m x head_dim tile of query block m (the tile
  // itself sits where the row-major one would, at row m * block_m) of the element of accumulator
  // register k (k = 4j + 2i + e, the PTX wgmma D fragment) of thread t of warpgroup c: the tile
  // is the two warpgroups' pieces one after the other, each piece float pairs (k / 2) major,
  // thread minor, so a warp's 8-byte stores cover 256 contiguous bytes.
  static constexpr int dq_frag_offset(int c, int t, int k) {
    if (RedV4) return c * 64 * dq_cols() + 4 * ((k / 4) * 128 + t) + k % 4;  // (k / 4) major, thread, then k % 4
    return c * 64 * dq_cols() + 2 * ((k / 2) * 128 + t) + k % 2;
  }
  // The accumulator register k and thread t of warpgroup c's piece holding element (row, col) of
  // the tile (any col; the inverse of the fragment map, see dq_accum_offset).
  static constexpr int dq_accum_offset_any(int row, int col) {
    const int qs = row / 64, ds = col / dq_cols();
    const int c = qs + ds * dq_row_slices();
    const int rin = row % 64, cin = col % dq_cols();
    const int t = 32 * (rin / 16) + 4 * (rin % 8) + (cin % 8) / 2;
    const int k = 4 * (cin / 8) + 2 * ((rin % 16) / 8) + cin % 2;
    return dq_frag_offset(c, t, k);
  }
  // The inverse for the postprocess: offset of (row, col) of the tile, col % 8 == 0; the 8
  // columns col .. col + 7 of a row are 8 contiguous floats there.
  static constexpr int dq_accum_offset(int row, int col) {
    const int qs = row / 64, ds = col / dq_cols();
    const int c = qs + ds * dq_row_slices();  // the warpgroup of bwd_consumer's (qs, ds) split
    const int rin = row % 64, cin = col % dq_cols();
    const int t = 32 * (rin / 16) + 4 * (rin % 8);  // lane % 4 = 0: column 8j
    const int k = 4 * (cin / 8) + 2 * ((rin % 16) / 8);
    return dq_frag_offset(c, t, k);
  }
};

// The variant the library (bwd_hd*.cu) builds for each head dim; the standalone harness builds the
// others too. Measured on the H200 (NOTES.md, "bwd v2/v3/v4 on the H200"): V3 (PipelineScores +
// DqViaTma) at hd64/hd128, +17-28% over V0; V20 (DqInRing + SplitSdP) at hd256, +3-4% over V4
// (+20-24% over V0). Session 4: V51 = V3 + StsmPds + UniformWarpgroup at hd64/hd128 (the same
// schedule with 12-17% fewer instructions per consumer step: stmatrix for dS^T, wgmma descriptors
// in uniform registers). Session 5: V788 = V20 + the same two changes at hd256 (consumer step
// 996 -> 767 instructions), +2.5-3.5% kernel-only at 2k-16k, causal and not (palindromic).
// Session 6: V4096 at hd256 (bwd_kv80.cuh: 64 x 80 blocks, transposed dK/dV/dQ products, dQ by
// 16-byte atomics), +14-16% over V788 non-causal and +6-10% causal at 2k-16k (palindromic).
constexpr int bwd_default_variant(int head_dim) { return head_dim == 256 ? 4096 : 51; }
// The variant deterministic mode runs: V51's DqViaTma writer and V4096's consumers order their adds
// with the per-tile semaphore, so the default serves both (one instantiation).
constexpr int bwd_deterministic_variant(int head_dim) { return bwd_default_variant(head_dim); }
// Session 7: V59 = V51 + Persistent at hd128 (tile counter in the workspace, producer 40 / consumers
// 232 registers, 0 spills), whole backward palindromic on the H200: non-causal +2.9% / +1.4% at seq
// 2048 / 4096, +0.4% / -0.8% at 8192 / 16384; causal +0.6% / -0.4% / -1.1% / -2.0%. So the library
// runs bwd_short_seq_variant(head_dim) (< 0: none) when seq_k <= kBwdShortSeqK and the backward is
// not deterministic (the persistent kernel hands tiles out in completion order, which the
// semaphore ranks cannot follow), else the default; both are built for bf16 and fp16.
constexpr int bwd_short_seq_variant(int head_dim) { return head_dim == 128 ? 59 : -1; }
constexpr int64_t kBwdShortSeqK = 4096;
// Whether the library launches causal backwards in LPT sections (BwdLaunchOptions::lpt = -1):
// measured +3% at hd256 (V20, seq 2048 and 16384); at hd128 (V3) +3% at seq_k 2048 and about
// +3-6% at 4096 but -2.5% at 16384 (session 4, palindromic), so up to kBwdLptMaxSeqK there; at
// hd64 within +-1% up to 8192 and -3.5% at 16384, so off.
constexpr int64_t kBwdLptMaxSeqK = 4096;
constexpr bool bwd_lpt_default(int head_dim, int64_t seq_k) {
  return head_dim == 256 || (head_dim == 128 && seq_k <= kBwdLptMaxSeqK);
}

template <int HeadDim, int Variant = bwd_default_variant(HeadDim)>
struct BwdConfig;

// hd64 (FA3's 128 x 128): S^T slices are 64 x 128 (64 accumulator registers each for S and dP),
// dK/dV 64 x 64 per warpgroup, dQ split by query rows.
template <int V>
struct BwdConfig<64, V> : BwdTile</*HeadDim=*/64, /*BlockM=*/128, /*BlockN=*/128, /*ProducerRegs=*/24,
                                   /*ConsumerRegs=*/240, /*DqPieces=*/1, (V & 1) != 0, (V & 2) != 0, false,
                                   (V & 8) != 0, false, false, false, false, /*StsmPds=*/(V & 16) != 0,
                                   /*UniformWarpgroup=*/(V & 32) != 0> {
  static_assert((V & 4) == 0, "DqInRing is hd256 only");
};

// hd128 (FA3's causal 64 x 128): dK and dV 64 x 128 per warpgroup (64 + 64 registers), S and dP
// 64 x 64 (32 + 32), dQ split by head-dim columns.
template <int V>
struct BwdConfig<128, V> : BwdTile<128, 64, 128, /*ProducerRegs=*/(V & 8) ? 40 : 24, (V & 8) ? 232 : 240, 1, (V & 1) != 0, (V & 2) != 0, false, (V & 8) != 0,
                                   false, false, false, false, /*StsmPds=*/(V & 16) != 0,
                                   /*UniformWarpgroup=*/(V & 32) != 0, /*RedV4=*/(V & 1024) != 0> {
  static_assert((V & 4) == 0, "DqInRing is hd256 only");
  static_assert((V & 1024) == 0 || V == 1073, "RedV4 at hd128: variant 1073 (= 1024 + 49: V51 without DqViaTma) only");
};

// hd256: a warpgroup cannot hold 64 x 256 of both dK and dV, so the two warpgroups share 64 key
// rows and split the head dim (dK, dV: 64 x 128 each, 128 registers); P^T and dS^T go through
// shared memory. dQ is 64 x 128 per warpgroup (64 registers): 0 spills in one piece; DqPieces = 2
// would hold only 32 of them at a time if a change ever makes it spill.
// No DqViaTma variant (231 KB of shared memory already): Variant 2 and 3 are not instantiated.
// PipelineScores keeps S^T of the next step in flight beside dQ: dQ in 2 pieces of 32 registers.
// DqInRing (V & 4, hd256 only): the dQ pieces go through the Q/dO ring stages (see the top).
// Persistent (V & 8) at hd256: dQ in 2 pieces (32 registers), else its consumer spills.
// SplitSdP (V & 16, with DqInRing: variant 20): S^T on warpgroup 0, dP^T on warpgroup 1, each
// m64n64 over the whole 64 x 64 tile (see BwdTile). ScoresAhead (V & 32, variant 52 = 20 + 32):
// the next step's scores run during this step's dQ staging.
template <int V>
struct BwdConfig<256, V> : BwdTile<256, 64, 64, 24, 240, /*DqPieces=*/(V & 9) ? 2 : 1, (V & 1) != 0, false,
                                   (V & 4) != 0, (V & 8) != 0, (V & 16) != 0, (V & 32) != 0, (V & 64) != 0,
                                   /*DetRingWriter=*/(V & 128) != 0 || ((V & 16) != 0 && (V & 4) != 0),
                                   /*StsmPds=*/(V & 256) != 0, /*UniformWarpgroup=*/(V & 512) != 0,
                                   /*RedV4=*/(V & 1024) != 0> {
  // RedV4: variant 1024 (= V0 + red.global.add.v4) and 1808 (= V788 with the consumers' 16-byte
  // dQ atomics instead of the DqInRing staging and writer warp: each warpgroup frees the Q / dO
  // stage as soon as its wgmmas retired).
  static_assert((V & 1024) == 0 || V == 1024 || V == 1808, "RedV4: variants 1024 and 1808 only");
  static_assert((V & 128) == 0 || (V & 4) != 0, "DetRingWriter (variant 132 = 4 + 128) needs DqInRing");
  static_assert((V & 768) == 0 || V == 788 || V == 1808, "StsmPds + UniformWarpgroup at hd256: variants 788, 1808");
  static_assert((V & 2) == 0, "hd256 has no DqViaTma variant");
  static_assert((V & 5) != 5, "DqInRing uses the v1 schedule (no PipelineScores)");
  static_assert((V & 16) == 0 || (V & 29) == 20 || V == 1808, "SplitSdP: with DqInRing (20) or RedV4 (1808)");
  static_assert((V & 32) == 0 || (V & 16) != 0, "ScoresAhead (variant 52) needs SplitSdP");
  static_assert((V & 64) == 0 || (V & 4) != 0, "WriterTiming (variant 68 = 4 + 64) instruments DqInRing");
};

}  // namespace fa4::hopper
