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

// The same tensor, read in boxes of whole rows: a 5-D map (64 columns, seq, head_dim / 64 pieces,
// heads, batch) whose one box (64, box_rows, every piece, 1, 1) lands as the boxes of
// make_bshd_tensor_map for each 64-column piece side by side ([piece][row][64], 128-byte swizzle).
// For a stream read once (the decode kernel's K and V): the L2 fetches its 128-byte lines, not 256
// bytes a request as make_bshd_tensor_map's (H200, kernel only: 16 x 8192 32/8 4,265 GB/s against
// 3,950, 8 x 32768 16/16 4,455 against 4,150).
std::string make_bshd_rows_tensor_map(CUtensorMap* map, const void* base, bool is_bf16, int64_t batch, int64_t seq,
                                      int64_t heads, int64_t head_dim, int box_rows);

}  // namespace fa4::hopper
