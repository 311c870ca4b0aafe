// XLA FFI handler "jax_fa4_bwd_cuda": (q, k, v, o, lse, do, dlse) -> (dq, dk, dv, workspace);
// attributes softmax_scale, causal, deterministic (bitwise reproducible dq: the kernel orders the
// dQ adds of each query block by key block, see cuda/hopper/bwd_kernel.cuh).
// Decodes and checks the buffers, splits the float32 workspace (dQ accumulator, lse * log2 e,
// delta') out of its last result, and enqueues the Hopper backward (cuda/hopper/bwd_launch.h) on
// XLA's stream. Every problem becomes an FFI error (the Python layer checks too, but this handler
// trusts nothing).
//
// The workspace is a uint8 result of at least bwd_workspace_bytes(...) bytes
// (cuda/hopper/bwd_workspace.h; the lowering in jax_fa4/primitives.py asks the extension for the
// size and drops the result), not FFI scratch: XLA's ScratchAllocator refused even 34 KB on an
// H200 (jax 0.11.2). XLA allocates it like any other output (buffer assignment, stream ordered),
// and any base alignment works (the split aligns each sub-buffer up inside it).
#include <cuda_runtime.h>

#include <cmath>
#include <string>

#include "ffi/cuda_device.h"
#include "ffi/ffi_text.h"
#include "ffi/handlers.h"
#include "hopper/bwd_launch.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

using jax_fa4::ffi_text::dims_str;
using jax_fa4::ffi_text::dtype_str;

bool same_dims(ffi::AnyBuffer::Dimensions d, std::initializer_list<int64_t> want) {
  if (d.size() != want.size()) return false;
  size_t i = 0;
  for (int64_t w : want) {
    if (d[i++] != w) return false;
  }
  return true;
}

ffi::Error BwdCudaImpl(cudaStream_t stream, ffi::AnyBuffer q, ffi::AnyBuffer k, ffi::AnyBuffer v, ffi::AnyBuffer o,
                       ffi::Buffer<ffi::F32> lse, ffi::AnyBuffer d_o, ffi::Buffer<ffi::F32> dlse,
                       ffi::Result<ffi::AnyBuffer> dq, ffi::Result<ffi::AnyBuffer> dk, ffi::Result<ffi::AnyBuffer> dv,
                       ffi::Result<ffi::AnyBuffer> workspace, double softmax_scale, bool causal,
                       bool deterministic) {
  if (ffi::Error err = jax_fa4::check_hopper_device(); err.failure()) return err;

  const auto qd = q.dimensions(), kd = k.dimensions(), vd = v.dimensions();
  if (qd.size() != 4 || kd.size() != 4 || vd.size() != 4)
    return ffi::Error::InvalidArgument("q, k, v must be rank 4 [batch, seq, heads, head_dim]; got q " +
                                       dims_str(qd) + ", k " + dims_str(kd) + ", v " + dims_str(vd));
  const ffi::DataType t = q.element_type();
  if (t != ffi::DataType::BF16 && t != ffi::DataType::F16)
    return ffi::Error::InvalidArgument("the CUDA kernel supports bfloat16 and float16; q is " + dtype_str(t));
  for (auto [name, et] : {std::pair<const char*, ffi::DataType>{"k", k.element_type()},
                          {"v", v.element_type()}, {"o", o.element_type()}, {"do", d_o.element_type()},
                          {"dq", dq->element_type()}, {"dk", dk->element_type()}, {"dv", dv->element_type()}}) {
    if (et != t)
      return ffi::Error::InvalidArgument(std::string("q, k, v, o, do, dq, dk and dv must share one dtype; q is ") +
                                         dtype_str(t) + ", " + name + " is " + dtype_str(et));
  }
  const int64_t b = qd[0], sq = qd[1], hq = qd[2], d = qd[3], sk = kd[1], hkv = kd[2];
  if (kd[0] != b || kd[3] != d || !same_dims(vd, {b, sk, hkv, d}))
    return ffi::Error::InvalidArgument("k and v must be [batch, seq_k, heads_kv, head_dim] matching q " +
                                       dims_str(qd) + "; got k " + dims_str(kd) + ", v " + dims_str(vd));
  if (d != 64 && d != 128 && d != 256)
    return ffi::Error::InvalidArgument("head_dim " + std::to_string(d) +
                                       " is not supported by the CUDA kernel (supported: 64, 128, 256)");
  if (hkv <= 0 ? hq != 0 : hq % hkv != 0)
    return ffi::Error::InvalidArgument("heads_q (" + std::to_string(hq) + ") must be a multiple of heads_kv (" +
                                       std::to_string(hkv) + ")");
  const std::initializer_list<int64_t> q_shape = {b, sq, hq, d};
  const std::initializer_list<int64_t> vec_shape = {b, hq, sq};
  if (!same_dims(o.dimensions(), q_shape) || !same_dims(d_o.dimensions(), q_shape))
    return ffi::Error::InvalidArgument("o and do must have q's shape " + dims_str(qd) + "; got o " +
                                       dims_str(o.dimensions()) + ", do " + dims_str(d_o.dimensions()));
  if (!same_dims(lse.dimensions(), vec_shape) || !same_dims(dlse.dimensions(), vec_shape))
    return ffi::Error::InvalidArgument("lse and dlse must be float32 [batch, heads_q, seq_q] = [" +
                                       std::to_string(b) + ", " + std::to_string(hq) + ", " + std::to_string(sq) +
                                       "]; got lse " + dims_str(lse.dimensions()) + ", dlse " +
                                       dims_str(dlse.dimensions()));
  if (!same_dims(dq->dimensions(), q_shape) || !same_dims(dk->dimensions(), {b, sk, hkv, d}) ||
      !same_dims(dv->dimensions(), {b, sk, hkv, d}))
    return ffi::Error::InvalidArgument("dq must have q's shape and dk, dv k's shape; got dq " +
                                       dims_str(dq->dimensions()) + ", dk " + dims_str(dk->dimensions()) + ", dv " +
                                       dims_str(dv->dimensions()));
  const float scale = static_cast<float>(softmax_scale);
  if (!(scale > 0.f) || std::isinf(scale))
    return ffi::Error::InvalidArgument("softmax_scale must be positive and finite; got " +
                                       std::to_string(softmax_scale));

  fa4::hopper::BwdProblem p{q.untyped_data(),   k.untyped_data(),    v.untyped_data(),  o.untyped_data(),
                            lse.typed_data(),   d_o.untyped_data(),  dlse.typed_data(), dq->untyped_data(),
                            dk->untyped_data(), dv->untyped_data(),  b,                 sq,
                            sk,                 hq,                  hkv,               d,
                            t == ffi::DataType::BF16 ? fa4::hopper::BwdDtype::kBf16 : fa4::hopper::BwdDtype::kF16,
                            scale,              causal,             deterministic};
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
                                  .Ret<ffi::AnyBuffer>()         // dq [b, sq, hq, d]
                                  .Ret<ffi::AnyBuffer>()         // dk [b, sk, hkv, d]
                                  .Ret<ffi::AnyBuffer>()         // dv [b, sk, hkv, d]
                                  .Ret<ffi::AnyBuffer>()         // workspace: uint8 [>= bwd_workspace_bytes]
                                  .Attr<double>("softmax_scale")
                                  .Attr<bool>("causal")
                                  .Attr<bool>("deterministic"));
