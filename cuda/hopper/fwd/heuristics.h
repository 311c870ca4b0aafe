// Which named configuration the library runs for a forward problem (plain C++, host only).
#pragma once
#include <cstdint>

#include "hopper/common/problem.h"

namespace fa4::hopper {

// The persistent configurations pay where overlapping one tile's epilogue with the next tile's
// loads matters: on short tiles. They run up to this many keys (0: the head dim has none);
// longer problems run the one-tile configuration. docs/hopper-kernels.md has the measurements.
constexpr int64_t fwd_persistent_max_seq_k(int64_t head_dim, bool causal) {
  return head_dim == 64 ? 4096 : head_dim == 128 ? (causal ? 4096 : 2048) : 0;
}

// The keys one 128-row query tile visits at most under the problem's band: a window bounded on
// both sides spans left + right + 128 keys whatever seq_k is (lengths and ids, device data, can
// only shorten it).
inline int64_t fwd_band_keys(const ProblemShape& p) {
  const AttentionVariant& v = p.variant;
  const int64_t right = p.causal && v.window_right > 0 ? 0 : v.window_right;
  if (v.window_left >= kWindowUnbounded || right >= kWindowUnbounded) return p.seq_k;
  const int64_t span = int64_t(v.window_left) + right + 128;
  return span < p.seq_k ? (span > 0 ? span : 0) : p.seq_k;
}

// The most keys a window's tiles may visit for hd128 to run persistent when the window, not the
// sequence, bounds them (H200, 16k keys, causal: window 1024 ties, 0.308 against 0.309 ms; window
// 2048 the one-tile kernel is 5.5% faster, 0.507 against 0.536; window 4096 0.865 against 0.978).
constexpr int64_t kFwdHd128PersistentWindowKeys = 1024 + 128;

// Whether the problem runs the head dim's persistent configuration. Dense problems by seq_k; every
// masked one (causal, or a variant, which run the masked kernels' tile shape) by the keys a tile
// visits, against the causal threshold: a window of 1024 over 16k keys has tiles as short as a
// causal 1k problem's. At hd128 a window over a longer sequence takes the persistent kernel only
// up to kFwdHd128PersistentWindowKeys.
inline bool fwd_use_persistent(const ProblemShape& p, bool variant_kernel) {
  const bool dense = !p.causal && !variant_kernel;
  const int64_t keys = fwd_band_keys(p);
  if (p.head_dim == 128 && keys < p.seq_k && keys > kFwdHd128PersistentWindowKeys) return false;
  return keys <= fwd_persistent_max_seq_k(p.head_dim, !dense);
}

}  // namespace fa4::hopper
