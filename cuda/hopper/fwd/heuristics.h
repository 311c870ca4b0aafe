// Which named configuration the library runs for a forward problem (plain C++, host only).
#pragma once
#include <cstdint>

namespace fa4::hopper {

// The persistent configurations pay where overlapping one tile's epilogue with the next tile's
// loads matters: on short tiles. They run up to this many keys (0: the head dim has none);
// longer problems run the one-tile configuration. docs/hopper-kernels.md has the measurements.
constexpr int64_t fwd_persistent_max_seq_k(int64_t head_dim, bool causal) {
  return head_dim == 64 ? 4096 : head_dim == 128 ? (causal ? 4096 : 2048) : 0;
}

}  // namespace fa4::hopper
