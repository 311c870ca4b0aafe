// XLA FFI handler "jax_fa4_fwd_cuda": (q, k, v, q_lengths, kv_lengths, q_segment_ids,
// kv_segment_ids, sinks, q_segment_ranges, kv_segment_ranges) -> (o, lse, workspace); absent
// optional operands are [0] buffers. Decodes and checks the buffers and the variant (ffi/args.h,
// shared with the CPU handler) into the problem, then launches the Hopper forward
// (cuda/hopper/fwd/launch.h) on XLA's stream. Every problem becomes an FFI error (the Python layer
// checks too at trace time, but this handler trusts nothing).
//
// The workspace is a uint8 result of at least fwd_workspace_bytes(...) bytes (cuda/hopper/decode/
// plan.h: the split-KV decode path's float32 partial outputs and LSEs; 0 bytes for most shapes),
// which the lowering in jax_fa4/lowering.py sizes through the extension and drops. It is a result,
// not FFI scratch, for the backward's reason: XLA's ScratchAllocator refused even small requests on
// an H200. Any base alignment works (the decode path aligns its sub-buffers up inside it).
#include <cuda_runtime.h>

#include <string>

#include "ffi/args.h"
#include "ffi/cuda_device.h"
#include "ffi/handlers.h"
#include "hopper/decode/plan.h"
#include "hopper/fwd/launch.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

using jax_fa4::ffi_text::dims_str;
using jax_fa4::ffi_text::dtype_str;

ffi::Error FwdCudaImpl(cudaStream_t stream, ffi::AnyBuffer q, ffi::AnyBuffer k, ffi::AnyBuffer v,
                       ffi::AnyBuffer q_lengths, ffi::AnyBuffer kv_lengths, ffi::AnyBuffer q_segment_ids,
                       ffi::AnyBuffer kv_segment_ids, ffi::AnyBuffer sinks, ffi::AnyBuffer q_segment_ranges,
                       ffi::AnyBuffer kv_segment_ranges, ffi::Result<ffi::AnyBuffer> o,
                       ffi::Result<ffi::Buffer<ffi::F32>> lse, ffi::Result<ffi::AnyBuffer> workspace,
                       double softmax_scale, bool causal, int64_t window_left, int64_t window_right,
                       double softcap) {
  const char* pass = "forward";
  if (ffi::Error err = jax_fa4::check_hopper_device(); err.failure()) return err;
  jax_fa4::ffi_args::Dims d{};
  if (auto err = jax_fa4::ffi_args::check_fwd(q, k, v, *o, *lse, softmax_scale, &d); err.failure()) return err;
  if (auto err = jax_fa4::ffi_args::check_cuda_support(pass, d); err.failure()) return err;
  const jax_fa4::ffi_args::VariantOperands ops{&q_lengths, &kv_lengths,       &q_segment_ids,    &kv_segment_ids,
                                               &sinks,     &q_segment_ranges, &kv_segment_ranges};
  fa4::hopper::AttentionVariant variant;
  if (auto err = jax_fa4::ffi_args::decode_variant(pass, d, ops, window_left, window_right, softcap, &variant);
      err.failure())
    return err;

  fa4::hopper::FwdProblem p{};
  static_cast<fa4::hopper::ProblemShape&>(p) = jax_fa4::ffi_args::hopper_shape(d, softmax_scale, causal, variant);
  p.q = q.untyped_data();
  p.k = k.untyped_data();
  p.v = v.untyped_data();
  p.o = o->untyped_data();
  p.lse = lse->typed_data();
  // The workspace result: uint8 [n] with n >= fwd_workspace_bytes of the static shape, the size the
  // lowering asked the extension for; checked here so a mismatched caller gets an error, not a
  // write past its buffer.
  const size_t ws_need = fa4::hopper::fwd_workspace_bytes(d.batch, d.seq_q, d.seq_k, d.heads_q, d.heads_kv,
                                                          d.head_dim);
  const auto wsd = workspace->dimensions();
  if (workspace->element_type() != ffi::DataType::U8 || wsd.size() != 1)
    return jax_fa4::ffi_args::invalid(pass, "the workspace (3rd result) must be a rank-1 uint8 buffer; got " +
                                                dtype_str(workspace->element_type()) + " " + dims_str(wsd));
  if (workspace->size_bytes() < ws_need)
    return jax_fa4::ffi_args::invalid(pass, "the workspace (3rd result) has " +
                                                std::to_string(workspace->size_bytes()) +
                                                " bytes; this problem needs " + std::to_string(ws_need) +
                                                " (cuda_fwd_workspace_bytes)");
  if (ws_need > 0) {
    if (workspace->untyped_data() == nullptr)
      return jax_fa4::ffi_args::invalid(pass, "the workspace (3rd result) has no device memory");
    p.workspace = workspace->untyped_data();
    p.workspace_bytes = workspace->size_bytes();
  }
  std::string err = fa4::hopper::launch_fwd(p, stream);
  if (!err.empty()) return ffi::Error::Internal("jax_fa4 forward: " + err);
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(Fa4FwdCuda, FwdCudaImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Arg<ffi::AnyBuffer>()  // q [b, sq, hq, d]
                                  .Arg<ffi::AnyBuffer>()  // k [b, sk, hkv, d]
                                  .Arg<ffi::AnyBuffer>()  // v [b, sk, hkv, d]
                                  .Arg<ffi::AnyBuffer>()  // q_lengths int32 [b] or [0]
                                  .Arg<ffi::AnyBuffer>()  // kv_lengths int32 [b] or [0]
                                  .Arg<ffi::AnyBuffer>()  // q_segment_ids int32 [b, sq] or [0]
                                  .Arg<ffi::AnyBuffer>()  // kv_segment_ids int32 [b, sk] or [0]
                                  .Arg<ffi::AnyBuffer>()  // sinks float32 [b, hq] or [0]
                                  .Arg<ffi::AnyBuffer>()  // q_segment_ranges int32 [b, ceil(sq / 64), 2] or [0]
                                  .Arg<ffi::AnyBuffer>()  // kv_segment_ranges int32 [b, ceil(sk / 64), 2] or [0]
                                  .Ret<ffi::AnyBuffer>()  // o [b, sq, hq, d], q's dtype
                                  .Ret<ffi::Buffer<ffi::F32>>()  // lse [b, hq, sq], natural log
                                  .Ret<ffi::AnyBuffer>()  // workspace uint8 [n], n >= fwd_workspace_bytes(...)
                                  .Attr<double>("softmax_scale")
                                  .Attr<bool>("causal")           // right bound min(window_right, 0)
                                  .Attr<int64_t>("window_left")   // >= 1 << 30: unbounded
                                  .Attr<int64_t>("window_right")  // >= 1 << 30: unbounded
                                  .Attr<double>("softcap"));      // 0: none
