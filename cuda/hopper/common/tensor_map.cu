#include <cudaTypedefs.h>

#include <mutex>

#include "hopper/common/tensor_map.h"

namespace fa4::hopper {
namespace {

PFN_cuTensorMapEncodeTiled_v12000 encode_fn(std::string* err) {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = nullptr;
  static std::string init_err;
  static std::once_flag once;
  std::call_once(once, [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    cudaError_t e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000,
                                                     cudaEnableDefault, &q);
    if (e != cudaSuccess || q != cudaDriverEntryPointSuccess || p == nullptr) {
      init_err = std::string("cannot find cuTensorMapEncodeTiled in the CUDA driver (") +
                 cudaGetErrorString(e) + ")";
      return;
    }
    fn = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  });
  if (!fn) *err = init_err;
  return fn;
}

// One cuTensorMapEncodeTiled call over a 16-bit [batch, seq, heads, head_dim] tensor with the
// 128-byte swizzle; `what` names the layout in the error message.
std::string encode_bshd(CUtensorMap* map, const void* base, bool is_bf16, cuuint32_t rank, const cuuint64_t* dims,
                        const cuuint64_t* strides, const cuuint32_t* box, CUtensorMapL2promotion promotion,
                        const std::string& what) {
  std::string err;
  auto encode = encode_fn(&err);
  if (!encode) return err;
  const cuuint32_t elem_strides[5] = {1, 1, 1, 1, 1};
  CUresult r = encode(map, is_bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, rank,
                      const_cast<void*>(base), dims, strides, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                      CU_TENSOR_MAP_SWIZZLE_128B, promotion, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) return "cuTensorMapEncodeTiled failed with CUresult " + std::to_string(int(r)) + " (" + what + ")";
  return {};
}

std::string shape_text(int64_t head_dim, int64_t seq, int64_t heads, int64_t batch, int box_rows) {
  return std::to_string(head_dim) + "x" + std::to_string(seq) + "x" + std::to_string(heads) + "x" +
         std::to_string(batch) + ", box rows " + std::to_string(box_rows);
}

}  // namespace

std::string make_bshd_tensor_map(CUtensorMap* map, const void* base, bool is_bf16, int64_t batch,
                                 int64_t seq, int64_t heads, int64_t head_dim, int box_rows) {
  const cuuint64_t elem = 2;
  const cuuint64_t dims[4] = {cuuint64_t(head_dim), cuuint64_t(seq), cuuint64_t(heads),
                              cuuint64_t(batch)};
  // Byte strides of dims 1..3 (dim 0 is contiguous).
  const cuuint64_t strides[3] = {cuuint64_t(heads * head_dim) * elem, cuuint64_t(head_dim) * elem,
                                 cuuint64_t(seq * heads * head_dim) * elem};
  const cuuint32_t box[4] = {64, cuuint32_t(box_rows), 1, 1};
  return encode_bshd(map, base, is_bf16, 4, dims, strides, box, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                     "dims " + shape_text(head_dim, seq, heads, batch, box_rows));
}

std::string make_bshd_rows_tensor_map(CUtensorMap* map, const void* base, bool is_bf16, int64_t batch, int64_t seq,
                                      int64_t heads, int64_t head_dim, int box_rows) {
  const cuuint64_t elem = 2, row = cuuint64_t(heads * head_dim) * elem;
  const cuuint64_t dims[5] = {64, cuuint64_t(seq), cuuint64_t(head_dim / 64), cuuint64_t(heads), cuuint64_t(batch)};
  // Byte strides of dims 1..4: the next row, the next 64-column piece, the next head, the next batch entry.
  const cuuint64_t strides[4] = {row, 64 * elem, cuuint64_t(head_dim) * elem, cuuint64_t(seq) * row};
  const cuuint32_t box[5] = {64, cuuint32_t(box_rows), cuuint32_t(head_dim / 64), 1, 1};
  return encode_bshd(map, base, is_bf16, 5, dims, strides, box, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                     "whole rows: dims " + shape_text(head_dim, seq, heads, batch, box_rows));
}

}  // namespace fa4::hopper
