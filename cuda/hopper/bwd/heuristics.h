// Which named configuration (bwd/config.cuh) and which schedule the library runs for a backward
// problem. Host-only plain C++.
#pragma once
#include <climits>
#include <cstdint>

#include "hopper/bwd/config.cuh"
#include "hopper/bwd/launch.h"
#include "hopper/common/mask.cuh"

namespace fa4::hopper {

enum class BwdConfigId { kHd64, kHd64Persistent, kHd128, kHd128Rows80, kHd128Persistent, kHd256 };

// The configuration's name() (config.cuh), for messages and the harness.
inline const char* bwd_config_name(BwdConfigId id) {
  switch (id) {
    case BwdConfigId::kHd64: return "hd64";
    case BwdConfigId::kHd64Persistent: return "hd64 persistent";
    case BwdConfigId::kHd128: return "hd128";
    case BwdConfigId::kHd128Rows80: return "hd128 (80x128)";
    case BwdConfigId::kHd128Persistent: return "hd128 persistent";
    default: return "hd256 (64x80)";
  }
}

// The persistent hd128 kernel runs plain dense and causal problems when the keys are at most this
// many and the backward is not deterministic (its tiles go out in completion order, which the
// semaphore ranks cannot follow): its K/V loads of the next tile overlap the dK/dV stores of this
// one, which pays when tiles are short. With the dQ-under-dK step order it ran dense 2k 6% and 4k
// about 5% ahead of the 80-row tile kernel-only on an H100, which runs longer problems without a
// mask (2-5% ahead of the 64-row kernels at 8k-16k; docs A.6b and C.2 item 6).
constexpr int64_t kBwdShortSeqK = 4096;
// hd64 runs plain dense and causal problems (not deterministic) on its persistent kernel up to
// this many keys: kernel-only on an H100 it was ahead of the grid kernel in every measured cell,
// 1-2.5% dense and 3-3.5% causal at 2k-8k (benchmarks/results/h100-kernel-only-bwd-hd64-persistent.json);
// longer sequences were not measured.
constexpr int64_t kBwdHd64PersistentMaxSeqK = 8192;
// Causal grid kernels run in the sectioned longest-first order at hd256 and at hd128 up to this
// seq_k (beyond it the sections lose more L2 reuse than the order gains); not at hd64.
constexpr int64_t kBwdLptMaxSeqK = 4096;
// The L2 share of one section: the (batch, kv head) pairs whose Q, dO (2 x 2 bytes) and dq_accum
// (4 bytes) rows fit it.
constexpr int64_t kBwdLptSectionBytes = 16 << 20;

inline bool bwd_lpt_wanted(int64_t head_dim, int64_t seq_k) {
  return head_dim == 256 || (head_dim == 128 && seq_k <= kBwdLptMaxSeqK);
}

// Causal GQA at hd128 past kBwdLptMaxSeqK keys also runs longest first, in sections of at least
// this many pairs. A pair's Q, dO and dq_accum rows span the group's heads, so one pair alone
// fills a 16 MiB section and the sectioned order would be index order: (key block, kv head)
// with the key blocks of the last pairs, the longest under the mask among them, dispatched last.
// A greedy 132-SM model of 32 / 8 heads at 8k (16 pairs of 64 key blocks, cost = steps) finishes
// at 0.897 of perfect balance in index order and 0.996 in sections of two pairs; two pairs are
// also about what index order has in flight (132 CTAs over 64-block pairs), so the L2 footprint
// stays that of index order.
constexpr int kBwdGqaLptMinSection = 2;

inline bool bwd_gqa_lpt_wanted(const ProblemShape& p) {
  return p.head_dim == 128 && p.heads_kv > 0 && p.heads_q > p.heads_kv && p.seq_k > kBwdLptMaxSeqK;
}

// Pairs per section: those whose rows fit section_bytes, rounded down to a power of two, at least
// 1. Needs heads_kv > 0.
inline int bwd_lpt_section(const ProblemShape& p, int64_t section_bytes = kBwdLptSectionBytes) {
  const int64_t pairs = p.heads_kv * p.batch;
  int64_t pair_bytes = (p.heads_q / p.heads_kv) * p.seq_q * p.head_dim * 8;
  if (pair_bytes < 1) pair_bytes = 1;
  int64_t section = 1;
  while (section * 2 * pair_bytes <= section_bytes && section * 2 <= pairs) section *= 2;
  return int(section);
}

// A causal band: the window's right bound is the diagonal (causal, or window_right == 0), its left
// bound a non-negative number of keys, and nothing else (no lengths, segment ids or soft cap).
// At hd128 it runs the kCausal grid kernel with the left edge as one more threshold per key row
// (BwdArgs::band_reach), not the kVariant one: 3% faster kernel-only at a window of 1,024 over
// 16k, 17% in deterministic mode (the causal ranks are a formula, the variant ones a count). At
// hd64 the threshold made the kCausal step slower than the kVariant kernel (1-3%), so hd64 (and
// hd256) keep kVariant for bands (bwd_causal_bands_at, config.cuh). Sequences are bounded so that
// the band's row arithmetic stays in int.
inline bool bwd_causal_band(const ProblemShape& p) {
  const AttentionVariant& v = p.variant;
  const bool right_on_diagonal = v.window_right == 0 || (p.causal && v.window_right >= 0);
  return bwd_causal_bands_at(int(p.head_dim)) && v.window_left >= 0 &&
         v.window_left < kWindowUnbounded && right_on_diagonal && !v.has_lengths() && !v.has_segments() && v.softcap == 0.f &&
         p.seq_q + p.seq_k <= INT_MAX / 2;
}

// Plain causal attention with a soft cap where it runs the grid's kCausal kernel
// (bwd_softcap_causal_at): its key blocks' work is causal's, so it takes causal's schedule.
inline bool bwd_is_capped_causal(const ProblemShape& p) {
  return p.variant.softcap > 0.f && mask_kind(p) == MaskKind::kCausal && bwd_softcap_causal_at(int(p.head_dim));
}

// The mask kind the backward's grid kernels run a problem under: a causal band runs kCausal (with
// the band's left edge), and so does plain causal attention with a soft cap at hd64 / hd128
// (bwd_softcap_causal_at); every other window, lengths, segment ids or soft cap kVariant.
inline MaskKind bwd_mask_kind(const ProblemShape& p) {
  if (bwd_causal_band(p)) return MaskKind::kCausal;
  if (p.variant.softcap > 0.f) return bwd_is_capped_causal(p) ? MaskKind::kCausal : MaskKind::kVariant;
  return mask_kind(p);
}

// Whether the problem runs the kVariant kernels (a window other than a causal band at hd128,
// lengths, segment ids, or a soft cap other than on plain causal attention at hd64 / hd128).
inline bool bwd_is_variant(const ProblemShape& p) { return bwd_mask_kind(p) == MaskKind::kVariant; }

// Plain dense or causal attention: what the persistent configuration is built for.
inline bool bwd_is_plain(const ProblemShape& p) {
  return mask_kind(p) != MaskKind::kVariant && p.variant.softcap == 0.f;
}

// kCausal kernels: the last query row that sees key j is j + band_reach (rows past seq_q do not
// exist, so band_reach >= seq_q hides nothing: plain causal); window_left - (seq_k - seq_q) for a
// causal band, clamped to seq_q.
inline int bwd_band_reach(const ProblemShape& p) {
  if (!bwd_causal_band(p)) return int(p.seq_q);
  const int64_t reach = int64_t(p.variant.window_left) - (p.seq_k - p.seq_q);
  return int(reach < p.seq_q ? reach : p.seq_q);
}

inline BwdConfigId bwd_config_for(const BwdProblem& p) {
  if (p.head_dim == 64)
    return p.seq_k <= kBwdHd64PersistentMaxSeqK && !p.deterministic && bwd_is_plain(p) ? BwdConfigId::kHd64Persistent
                                                                                      : BwdConfigId::kHd64;
  // Variant problems and causal bands run the grid kernel: the persistent one is built for plain
  // dense and causal attention (a band leaves key blocks without steps, which its writer's
  // hand-over does not model). Longer (or deterministic) problems without a mask run the 80-row tile.
  if (p.head_dim == 128) {
    if (p.seq_k <= kBwdShortSeqK && !p.deterministic && bwd_is_plain(p)) return BwdConfigId::kHd128Persistent;
    if (bwd_mask_kind(p) == MaskKind::kDense) return BwdConfigId::kHd128Rows80;  // a soft cap is kVariant
    return BwdConfigId::kHd128;
  }
  return BwdConfigId::kHd256;
}

// The (query rows, keys) block of a configuration (config.cuh).
inline void bwd_config_blocks(BwdConfigId id, int* block_m, int* block_n) {
  *block_m = id == BwdConfigId::kHd64 || id == BwdConfigId::kHd64Persistent ? 128 : id == BwdConfigId::kHd128Rows80 ? 80 : 64;
  *block_n = id == BwdConfigId::kHd256 ? 80 : 128;
}

// The host's model of a variant problem's work per key block: the query blocks its band sees
// (TileMask's ranges with the full sequence lengths: lengths and segment ids live on the device,
// so they are not in the model). Sets *uneven when the key blocks' work differs (then the
// longest-first order pays) and *last_longest when the last key block has more than the first.
inline void bwd_variant_band_work(const ProblemShape& p, int block_m, int block_n, bool* uneven,
                                  bool* last_longest) {
  MaskArgs a = make_mask_args(p);
  a.q_lengths = a.kv_lengths = a.q_ids = a.kv_ids = a.q_ranges = a.kv_ranges = nullptr;
  const TileMask<MaskKind::kVariant> band(a, 0);
  const int n_blocks = int((p.seq_k + block_n - 1) / block_n);
  int lo = INT_MAX, hi = -1, first = 0, last = 0;
  for (int n = 0; n < n_blocks; ++n) {
    int b, e;
    band.query_blocks(n * block_n, (n + 1) * block_n, block_m, &b, &e);
    const int w = e - b;
    lo = w < lo ? w : lo;
    hi = w > hi ? w : hi;
    if (n == 0) first = w;
    last = w;
  }
  *uneven = n_blocks > 0 && hi > lo;
  *last_longest = last > first;
}

struct BwdPlan {
  BwdConfigId config;
  BwdSchedule schedule;
};

// The library's choice for a problem that passed check_problem_shape with heads_kv > 0. The
// persistent kernel hands out causal tiles longest first always (its dynamic tile counter is
// greedy list scheduling, which wants the longest first).
//
// Variant problems and causal bands (not bwd_is_plain; capped causal takes causal's branch): the grid configuration of the head dim;
// their key blocks go longest first by the band's work (bwd_variant_band_work), not the dense
// count: last-first when the band makes the last key blocks the longest (a window bounded on the
// left only; the kVariant kernels only), and in longest-first sections (where the head dim wants
// them, as causal) when the work is uneven. A window bounded on both sides gives every interior
// key block the same work: plain grid order.
inline BwdPlan bwd_plan(const BwdProblem& p) {
  BwdPlan plan;
  plan.config = bwd_config_for(p);
  plan.schedule.max_ctas = 0;
  if (!bwd_is_plain(p) && !bwd_is_capped_causal(p)) {
    int bm, bn;
    bwd_config_blocks(plan.config, &bm, &bn);
    bool uneven = false, last_longest = false;
    bwd_variant_band_work(p, bm, bn, &uneven, &last_longest);
    plan.schedule.reverse_blocks = last_longest && !p.deterministic;
    plan.schedule.lpt_section =
        uneven && !p.deterministic && bwd_lpt_wanted(p.head_dim, p.seq_k) ? bwd_lpt_section(p) : 0;
    return plan;
  }
  const bool gqa = bwd_gqa_lpt_wanted(p);
  const bool lpt = plan.config == BwdConfigId::kHd128Persistent || plan.config == BwdConfigId::kHd64Persistent || bwd_lpt_wanted(p.head_dim, p.seq_k) || gqa;
  int section = bwd_lpt_section(p);
  if (gqa) {
    const int64_t pairs = p.heads_kv * p.batch;
    const int least = pairs < kBwdGqaLptMinSection ? int(pairs) : kBwdGqaLptMinSection;
    section = section > least ? section : least;
  }
  plan.schedule.lpt_section = p.causal && !p.deterministic && lpt ? section : 0;
  return plan;
}

}  // namespace fa4::hopper
