// XLA FFI handler "jax_fa4_fwd_cuda": decodes and checks the buffers (ffi/args.h, shared with the
// CPU handler), then launches the Hopper forward (cuda/hopper/fwd/launch.h) on XLA's stream. Every
// problem becomes an FFI error (the Python layer checks too at trace time, but this handler
// trusts nothing).
#include <cuda_runtime.h>

#include <string>

#include "ffi/args.h"
#include "ffi/cuda_device.h"
#include "ffi/handlers.h"
#include "hopper/fwd/launch.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

ffi::Error FwdCudaImpl(cudaStream_t stream, ffi::AnyBuffer q, ffi::AnyBuffer k, ffi::AnyBuffer v,
                       ffi::Result<ffi::AnyBuffer> o, ffi::Result<ffi::Buffer<ffi::F32>> lse,
                       double softmax_scale, bool causal) {
  if (ffi::Error err = jax_fa4::check_hopper_device(); err.failure()) return err;
  jax_fa4::ffi_args::Dims d{};
  if (auto err = jax_fa4::ffi_args::check_fwd(q, k, v, *o, *lse, softmax_scale, &d); err.failure()) return err;
  if (auto err = jax_fa4::ffi_args::check_cuda_support("forward", d); err.failure()) return err;

  fa4::hopper::FwdProblem p{};
  static_cast<fa4::hopper::ProblemShape&>(p) = jax_fa4::ffi_args::hopper_shape(d, softmax_scale, causal);
  p.q = q.untyped_data();
  p.k = k.untyped_data();
  p.v = v.untyped_data();
  p.o = o->untyped_data();
  p.lse = lse->typed_data();
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
