// XLA FFI handler "jax_fa4_fwd_cuda": decodes and checks the buffers, then launches the Hopper
// forward kernel (cuda/hopper/fwd_launch.h) on XLA's stream. Every problem becomes an FFI error
// (the Python layer checks too at trace time, but this handler trusts nothing).
#include <cuda_runtime.h>

#include <string>

#include "ffi/cuda_device.h"
#include "ffi/ffi_text.h"
#include "ffi/handlers.h"
#include "hopper/fwd_launch.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

using jax_fa4::ffi_text::dims_str;
using jax_fa4::ffi_text::dtype_str;

ffi::Error FwdCudaImpl(cudaStream_t stream, ffi::AnyBuffer q, ffi::AnyBuffer k, ffi::AnyBuffer v,
                       ffi::Result<ffi::AnyBuffer> o, ffi::Result<ffi::Buffer<ffi::F32>> lse,
                       double softmax_scale, bool causal) {
  if (ffi::Error err = jax_fa4::check_hopper_device(); err.failure()) return err;

  const auto qd = q.dimensions(), kd = k.dimensions(), vd = v.dimensions(), od = o->dimensions();
  const auto ld = lse->dimensions();
  if (qd.size() != 4 || kd.size() != 4 || vd.size() != 4)
    return ffi::Error::InvalidArgument("q, k, v must be rank 4 [batch, seq, heads, head_dim]; got q " +
                                       dims_str(qd) + ", k " + dims_str(kd) + ", v " + dims_str(vd));
  const ffi::DataType t = q.element_type();
  if (t != ffi::DataType::BF16 && t != ffi::DataType::F16)
    return ffi::Error::InvalidArgument("the CUDA kernel supports bfloat16 and float16; q is " + dtype_str(t));
  if (k.element_type() != t || v.element_type() != t || o->element_type() != t)
    return ffi::Error::InvalidArgument("q, k, v and o must share one dtype; got q " + dtype_str(t) + ", k " +
                                       dtype_str(k.element_type()) + ", v " + dtype_str(v.element_type()) +
                                       ", o " + dtype_str(o->element_type()));
  const int64_t b = qd[0], sq = qd[1], hq = qd[2], d = qd[3], sk = kd[1], hkv = kd[2];
  if (kd[0] != b || kd[3] != d || vd[0] != b || vd[1] != sk || vd[2] != hkv || vd[3] != d)
    return ffi::Error::InvalidArgument("k and v must be [batch, seq_k, heads_kv, head_dim] matching q " +
                                       dims_str(qd) + "; got k " + dims_str(kd) + ", v " + dims_str(vd));
  if (d != 64 && d != 128 && d != 256)
    return ffi::Error::InvalidArgument("head_dim " + std::to_string(d) +
                                       " is not supported by the CUDA kernel (supported: 64, 128, 256)");
  if (hkv <= 0 ? hq != 0 : hq % hkv != 0)
    return ffi::Error::InvalidArgument("heads_q (" + std::to_string(hq) + ") must be a multiple of heads_kv (" +
                                       std::to_string(hkv) + ")");
  if (od.size() != 4 || od[0] != b || od[1] != sq || od[2] != hq || od[3] != d)
    return ffi::Error::InvalidArgument("o must have q's shape " + dims_str(qd) + "; got " + dims_str(od));
  if (ld.size() != 3 || ld[0] != b || ld[1] != hq || ld[2] != sq)
    return ffi::Error::InvalidArgument("lse must be float32 [batch, heads_q, seq_q] = [" + std::to_string(b) +
                                       ", " + std::to_string(hq) + ", " + std::to_string(sq) + "]; got " +
                                       dims_str(ld));
  const float scale = static_cast<float>(softmax_scale);
  if (!(scale > 0.f) || scale == INFINITY)
    return ffi::Error::InvalidArgument("softmax_scale must be positive and finite; got " +
                                       std::to_string(softmax_scale));

  fa4::hopper::FwdProblem p{q.untyped_data(), k.untyped_data(), v.untyped_data(), o->untyped_data(),
                            lse->typed_data(), b, sq, sk, hq, hkv, d,
                            t == ffi::DataType::BF16 ? fa4::hopper::FwdDtype::kBf16 : fa4::hopper::FwdDtype::kF16,
                            scale, causal};
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
                                  .Ret<ffi::AnyBuffer>()  // o [b, sq, hq, d], q's dtype
                                  .Ret<ffi::Buffer<ffi::F32>>()  // lse [b, hq, sq], natural log
                                  .Attr<double>("softmax_scale")
                                  .Attr<bool>("causal"));
