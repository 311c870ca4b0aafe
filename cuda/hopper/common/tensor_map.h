// Host side: builds TMA tensor maps for [batch, seq, heads, head_dim] row-major tensors.
// cuTensorMapEncodeTiled is a driver API; we reach it through the runtime's driver entry point so
// the extension never links libcuda (the runtime is linked statically).
#pragma once
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

namespace fa4::hopper {

// Describes `base` as a 4-D tensor (head_dim, seq, heads, batch), innermost first, of 2-byte
// elements, read or written in boxes of (64 columns, box_rows rows, 1 head, 1 batch) with the
// 128-byte swizzle that the wgmma descriptors expect. Out-of-bounds box elements load as zero.
// Returns an empty string on success, else what went wrong.
std::string make_bshd_tensor_map(CUtensorMap* map, const void* base, bool is_bf16, int64_t batch,
                                 int64_t seq, int64_t heads, int64_t head_dim, int box_rows);

}  // namespace fa4::hopper
