// Which named configuration (bwd/config.cuh) and which schedule the library runs for a backward
// problem. Host-only plain C++.
#pragma once
#include <cstdint>

#include "hopper/bwd/launch.h"

namespace fa4::hopper {

enum class BwdConfigId { kHd64, kHd128, kHd128Persistent, kHd256 };

// The configuration's name() (config.cuh), for messages and the harness.
inline const char* bwd_config_name(BwdConfigId id) {
  switch (id) {
    case BwdConfigId::kHd64: return "hd64";
    case BwdConfigId::kHd128: return "hd128";
    case BwdConfigId::kHd128Persistent: return "hd128 persistent";
    default: return "hd256 (64x80)";
  }
}

// The persistent hd128 kernel runs when the keys are at most this many and the backward is not
// deterministic (its tiles go out in completion order, which the semaphore ranks cannot follow):
// its K/V loads of the next tile overlap the dK/dV stores of this one, which pays when tiles are
// short.
constexpr int64_t kBwdShortSeqK = 4096;
// Causal grid kernels run in the sectioned longest-first order at hd256 and at hd128 up to this
// seq_k (beyond it the sections lose more L2 reuse than the order gains); not at hd64.
constexpr int64_t kBwdLptMaxSeqK = 4096;
// The L2 share of one section: the (batch, kv head) pairs whose Q, dO (2 x 2 bytes) and dq_accum
// (4 bytes) rows fit it.
constexpr int64_t kBwdLptSectionBytes = 16 << 20;

inline bool bwd_lpt_wanted(int64_t head_dim, int64_t seq_k) {
  return head_dim == 256 || (head_dim == 128 && seq_k <= kBwdLptMaxSeqK);
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

inline BwdConfigId bwd_config_for(const BwdProblem& p) {
  if (p.head_dim == 64) return BwdConfigId::kHd64;
  if (p.head_dim == 128)
    return p.seq_k <= kBwdShortSeqK && !p.deterministic ? BwdConfigId::kHd128Persistent : BwdConfigId::kHd128;
  return BwdConfigId::kHd256;
}

struct BwdPlan {
  BwdConfigId config;
  BwdSchedule schedule;
};

// The library's choice for a problem that passed check_problem_shape with heads_kv > 0. The
// persistent kernel hands out causal tiles longest first always (its dynamic tile counter is
// greedy list scheduling, which wants the longest first).
inline BwdPlan bwd_plan(const BwdProblem& p) {
  BwdPlan plan;
  plan.config = bwd_config_for(p);
  const bool lpt = plan.config == BwdConfigId::kHd128Persistent || bwd_lpt_wanted(p.head_dim, p.seq_k);
  plan.schedule.lpt_section = p.causal && !p.deterministic && lpt ? bwd_lpt_section(p) : 0;
  plan.schedule.max_ctas = 0;
  return plan;
}

}  // namespace fa4::hopper
