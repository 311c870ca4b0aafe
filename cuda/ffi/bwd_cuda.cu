// XLA FFI handler "jax_fa4_bwd_cuda": (q, k, v, o, lse, do, dlse, q_lengths, kv_lengths,
// q_segment_ids, kv_segment_ids, q_segment_ranges, kv_segment_ranges) -> (dq, dk, dv, workspace);
// absent optional operands are [0] buffers (no sinks: the lse already includes them). Attributes
// softmax_scale, causal, window_left, window_right, softcap, deterministic (bitwise reproducible
// dq: the kernel orders the dQ adds of each query block by key block, see cuda/hopper/bwd/).
// Decodes and checks the buffers and the variant (ffi/args.h, shared with the CPU handler), splits the float32
// workspace (dQ accumulator, lse * log2 e, delta') out of its last result, and enqueues the Hopper
// backward (cuda/hopper/bwd/launch.h) on XLA's stream. Every problem becomes an FFI error (the Python layer checks too, but this handler
// trusts nothing).
//
// The workspace is a uint8 result of at least bwd_workspace_bytes(...) bytes
// (cuda/hopper/bwd/workspace.h; the lowering in jax_fa4/primitives.py asks the extension for the
// size and drops the result), not FFI scratch: XLA's ScratchAllocator refused even 34 KB on an
// H200 (jax 0.11.2). XLA allocates it like any other output (buffer assignment, stream ordered),
// and any base alignment works (the split aligns each sub-buffer up inside it).
#include <cuda_runtime.h>

#include <cmath>
#include <string>

#include "ffi/args.h"
#include "ffi/cuda_device.h"
#include "ffi/handlers.h"
#include "hopper/bwd/launch.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

using jax_fa4::ffi_text::dims_str;
using jax_fa4::ffi_text::dtype_str;

ffi::Error BwdCudaImpl(cudaStream_t stream, ffi::AnyBuffer q, ffi::AnyBuffer k, ffi::AnyBuffer v, ffi::AnyBuffer o,
                       ffi::Buffer<ffi::F32> lse, ffi::AnyBuffer d_o, ffi::Buffer<ffi::F32> dlse,
                       ffi::AnyBuffer q_lengths, ffi::AnyBuffer kv_lengths, ffi::AnyBuffer q_segment_ids,
                       ffi::AnyBuffer kv_segment_ids, ffi::AnyBuffer q_segment_ranges,
                       ffi::AnyBuffer kv_segment_ranges, ffi::Result<ffi::AnyBuffer> dq,
                       ffi::Result<ffi::AnyBuffer> dk, ffi::Result<ffi::AnyBuffer> dv,
                       ffi::Result<ffi::AnyBuffer> workspace, double softmax_scale, bool causal,
                       int64_t window_left, int64_t window_right, double softcap, bool deterministic) {
  const char* pass = "backward";
  if (ffi::Error err = jax_fa4::check_hopper_device(); err.failure()) return err;
  jax_fa4::ffi_args::Dims d{};
  if (auto err = jax_fa4::ffi_args::check_bwd(q, k, v, o, lse, d_o, dlse, *dq, *dk, *dv, softmax_scale, &d);
      err.failure())
    return err;
  if (auto err = jax_fa4::ffi_args::check_cuda_support(pass, d); err.failure()) return err;
  // No sinks: the forward's only (the lse already holds them).
  const jax_fa4::ffi_args::VariantOperands ops{&q_lengths,     &kv_lengths, &q_segment_ids,    &kv_segment_ids,
                                               nullptr,        &q_segment_ranges, &kv_segment_ranges};
  fa4::hopper::AttentionVariant variant;
  if (auto err = jax_fa4::ffi_args::decode_variant(pass, d, ops, window_left, window_right, softcap, &variant);
      err.failure())
    return err;
  const int64_t b = d.batch, sq = d.seq_q, hq = d.heads_q;

  fa4::hopper::BwdProblem p{};
  static_cast<fa4::hopper::ProblemShape&>(p) = jax_fa4::ffi_args::hopper_shape(d, softmax_scale, causal, variant);
  p.q = q.untyped_data();
  p.k = k.untyped_data();
  p.v = v.untyped_data();
  p.o = o.untyped_data();
  p.lse = lse.typed_data();
  p.d_o = d_o.untyped_data();
  p.dlse = dlse.typed_data();
  p.dq = dq->untyped_data();
  p.dk = dk->untyped_data();
  p.dv = dv->untyped_data();
  p.deterministic = deterministic;
  // The workspace result: uint8 [n] with n >= bwd_workspace_bytes(p); its base may have any
  // alignment (bwd_workspace_from aligns each sub-buffer up inside it).
  const size_t ws_need = fa4::hopper::bwd_workspace_bytes(p);
  const auto wsd = workspace->dimensions();
  if (workspace->element_type() != ffi::DataType::U8 || wsd.size() != 1)
    return ffi::Error::InvalidArgument("the workspace (4th result) must be a rank-1 uint8 buffer; got " +
                                       dtype_str(workspace->element_type()) + " " + dims_str(wsd));
  if (workspace->size_bytes() < ws_need)
    return ffi::Error::InvalidArgument("the workspace (4th result) has " + std::to_string(workspace->size_bytes()) +
                                       " bytes; this problem needs " + std::to_string(ws_need) +
                                       " (cuda_bwd_workspace_bytes)");
  fa4::hopper::BwdWorkspace ws{nullptr, nullptr, nullptr, nullptr, nullptr};
  if (b > 0 && sq > 0 && hq > 0) {
    if (workspace->untyped_data() == nullptr)
      return ffi::Error::InvalidArgument("the workspace (4th result) has no device memory");
    ws = fa4::hopper::bwd_workspace_from(workspace->untyped_data(), p);
  }
  std::string err = fa4::hopper::launch_bwd(p, ws, stream);
  if (!err.empty()) return ffi::Error::Internal("jax_fa4 backward: " + err);
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(Fa4BwdCuda, BwdCudaImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Arg<ffi::AnyBuffer>()         // q [b, sq, hq, d]
                                  .Arg<ffi::AnyBuffer>()         // k [b, sk, hkv, d]
                                  .Arg<ffi::AnyBuffer>()         // v [b, sk, hkv, d]
                                  .Arg<ffi::AnyBuffer>()         // o [b, sq, hq, d]
                                  .Arg<ffi::Buffer<ffi::F32>>()  // lse [b, hq, sq]
                                  .Arg<ffi::AnyBuffer>()         // do [b, sq, hq, d]
                                  .Arg<ffi::Buffer<ffi::F32>>()  // dlse [b, hq, sq]: cotangent of lse
                                  .Arg<ffi::AnyBuffer>()         // q_lengths int32 [b] or [0]
                                  .Arg<ffi::AnyBuffer>()         // kv_lengths int32 [b] or [0]
                                  .Arg<ffi::AnyBuffer>()         // q_segment_ids int32 [b, sq] or [0]
                                  .Arg<ffi::AnyBuffer>()         // kv_segment_ids int32 [b, sk] or [0]
                                  .Arg<ffi::AnyBuffer>()         // q_segment_ranges int32 [b, ceil(sq / 64), 2] or [0]
                                  .Arg<ffi::AnyBuffer>()         // kv_segment_ranges int32 [b, ceil(sk / 64), 2] or [0]
                                  .Ret<ffi::AnyBuffer>()         // dq [b, sq, hq, d]
                                  .Ret<ffi::AnyBuffer>()         // dk [b, sk, hkv, d]
                                  .Ret<ffi::AnyBuffer>()         // dv [b, sk, hkv, d]
                                  .Ret<ffi::AnyBuffer>()         // workspace: uint8 [>= bwd_workspace_bytes]
                                  .Attr<double>("softmax_scale")
                                  .Attr<bool>("causal")           // right bound min(window_right, 0)
                                  .Attr<int64_t>("window_left")   // >= 1 << 30: unbounded
                                  .Attr<int64_t>("window_right")  // >= 1 << 30: unbounded
                                  .Attr<double>("softcap")        // 0: none
                                  .Attr<bool>("deterministic"));
