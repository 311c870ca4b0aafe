// The decode path's launch (decode/plan.h): tensor maps of K and V, the split kernel and, with
// more than one split, the combine. launch_fwd (fwd/launch.cu) routes a problem here when its plan
// says so.
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <string>
#include <type_traits>

#include "hopper/common/dependent_launch.h"
#include "hopper/common/tensor_map.h"
#include "hopper/decode/kernel.cuh"
#include "hopper/decode/launch.h"

namespace fa4::hopper {

namespace {

template <class T, int D, int Rows, int CtasPerSm>
std::string launch_decode_typed(const FwdProblem& p, const DecodePlan& plan, cudaStream_t stream) {
  using Cfg = DecodeTile<D, Rows, CtasPerSm>;
  if (plan.rows_per_cta != Cfg::rows() || plan.ctas_per_sm != Cfg::ctas_per_sm())
    return "decode plan and configuration disagree on the rows or CTAs per SM";
  const bool bf16 = std::is_same_v<T, __nv_bfloat16>;
  // K and V are streamed once, in boxes of whole rows with 128-byte L2 promotion.
  CUtensorMap tk, tv;
  std::string err;
  if (!(err = make_bshd_rows_tensor_map(&tk, p.k, bf16, p.batch, p.seq_k, p.heads_kv, p.head_dim, Cfg::block_n()))
           .empty())
    return err;
  if (!(err = make_bshd_rows_tensor_map(&tv, p.v, bf16, p.batch, p.seq_k, p.heads_kv, p.head_dim, Cfg::block_n()))
           .empty())
    return err;

  DecodeArgs a{};
  a.q = p.q;
  a.o = p.o;
  a.lse = p.lse;
  a.sinks = p.variant.sinks;
  a.mask = make_mask_args(p);
  a.seq_q = int(p.seq_q);
  a.seq_k = int(p.seq_k);
  a.heads_q = int(p.heads_q);
  a.heads_kv = int(p.heads_kv);
  a.group = int(p.heads_q / p.heads_kv);
  a.rows = plan.rows;
  a.splits = plan.splits;
  a.batch = int(p.batch);
  a.scale_log2 = p.softmax_scale * 1.4426950408889634f;
  a.cap_scale = 0.f;
  if (p.variant.softcap > 0.f) {
    // Scores become c tanh(scale q.k / c): tanh of q.k * (scale / c), then the softmax's scale is c.
    a.cap_scale = p.softmax_scale / p.variant.softcap;
    a.scale_log2 = p.variant.softcap * 1.4426950408889634f;
  }
  if (plan.splits > 1) {
    const size_t need = decode_workspace_bytes(plan, p.batch, p.heads_kv, p.head_dim);
    if (p.workspace == nullptr || p.workspace_bytes < need)
      return "the decode path needs a workspace of " + std::to_string(need) + " bytes, got " +
             std::to_string(p.workspace_bytes);
    const DecodeWorkspace ws = decode_workspace_from(plan, p.batch, p.heads_kv, p.head_dim, p.workspace);
    a.o_part = ws.o_part;
    a.lse_part = ws.lse_part;
  }

  auto kernel = decode_kernel<T, Cfg>;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::smem_bytes());
  if (e != cudaSuccess) return std::string("cudaFuncSetAttribute: ") + cudaGetErrorString(e);
  const dim3 grid(unsigned(plan.splits), unsigned(p.heads_kv * plan.row_tiles), unsigned(p.batch));
  if (plan.dependent) {
    e = launch_dependent(kernel, grid, dim3(Cfg::threads()), Cfg::smem_bytes(), stream, tk, tv, a);
  } else {  // its grid_dependency_* instructions are then no-ops
    kernel<<<grid, Cfg::threads(), Cfg::smem_bytes(), stream>>>(tk, tv, a);
    e = cudaGetLastError();
  }
  if (e != cudaSuccess) return std::string("decode kernel launch failed: ") + cudaGetErrorString(e);
  if (plan.splits > 1) {
    const int64_t rows = p.batch * p.heads_kv * int64_t(plan.rows);
    e = launch_dependent(decode_combine<T, D>, dim3(unsigned(rows)), dim3(DecodeCombineShape<D>::threads()), 0, stream, a);
    if (e != cudaSuccess) return std::string("decode combine launch failed: ") + cudaGetErrorString(e);
  }
  return {};
}

template <class T>
std::string launch_decode_dtype(const FwdProblem& p, const DecodePlan& plan, cudaStream_t stream) {
  // The configurations: one 16-row tile (most decode shapes: a GQA group of up to 16 heads at one
  // position) at one or two CTAs per SM (DecodePlan::ctas_per_sm), or the 64-row tile
  // (decode_rows_per_cta; kKeys at head dim 64, kRows at 128 and 256) at one.
  const bool one_tile = plan.rows_per_cta == 16, two = plan.ctas_per_sm == 2;
  constexpr int kBig = kDecodeMaxRows;
  static_assert(decode_max_ctas_per_sm(64, kBig) == 1 && decode_max_ctas_per_sm(256, kBig) == 1 &&
                    decode_max_ctas_per_sm(128, kBig) == 1 && decode_max_ctas_per_sm(256, 16) == 1,
                "the instantiations below");
  switch (p.head_dim) {
    case 64:
      if (!one_tile) return launch_decode_typed<T, 64, kBig, 1>(p, plan, stream);
      return two ? launch_decode_typed<T, 64, 16, 2>(p, plan, stream) : launch_decode_typed<T, 64, 16, 1>(p, plan, stream);
    case 128:
      if (!one_tile) return launch_decode_typed<T, 128, kBig, 1>(p, plan, stream);
      return two ? launch_decode_typed<T, 128, 16, 2>(p, plan, stream)
                 : launch_decode_typed<T, 128, 16, 1>(p, plan, stream);
    default:
      if (!one_tile) return launch_decode_typed<T, 256, kBig, 1>(p, plan, stream);
      return launch_decode_typed<T, 256, 16, 1>(p, plan, stream);
  }
}

}  // namespace

std::string launch_decode(const FwdProblem& p, const DecodePlan& plan, cudaStream_t stream) {
  if (!plan.use) return "the problem is not a decode shape";
  if (p.seq_q > INT_MAX || p.seq_k > INT_MAX) return "sequence too long for the decode path";
  if (p.heads_kv * plan.row_tiles > 65535) return "heads_kv x row tiles over 65535 for the decode grid";
  if (p.dtype == Dtype::kBf16) return launch_decode_dtype<__nv_bfloat16>(p, plan, stream);
  return launch_decode_dtype<__half>(p, plan, stream);
}

}  // namespace fa4::hopper
