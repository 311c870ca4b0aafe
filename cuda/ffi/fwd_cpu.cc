// FFI handler jax_fa4_fwd_cpu: (q, k, v) -> (o, lse) on the CPU.
#include "cpu/attention_cpu.h"
#include "ffi/args.h"
#include "ffi/handlers.h"

namespace ffi = xla::ffi;

namespace jax_fa4::ffi_cpu {

// The CPU kernels' element type of an FFI dtype (check_cpu_support has admitted it).
cpu::ElementType element_type(ffi::DataType t) {
  return t == ffi::DataType::F32 ? cpu::ElementType::kF32
         : t == ffi::DataType::BF16 ? cpu::ElementType::kBF16 : cpu::ElementType::kF16;
}

cpu::AttentionShape cpu_shape(const ffi_args::Dims& d) {
  return cpu::AttentionShape{d.batch, d.seq_q, d.seq_k, d.heads_q, d.heads_kv, d.head_dim, d.head_dim_v};
}

namespace {

ffi::Error Fa4FwdCpuImpl(ffi::AnyBuffer q, ffi::AnyBuffer k, ffi::AnyBuffer v,
                         ffi::Result<ffi::AnyBuffer> o, ffi::Result<ffi::Buffer<ffi::F32>> lse,
                         double softmax_scale, bool causal) {
  ffi_args::Dims d{};
  if (auto err = ffi_args::check_fwd(q, k, v, *o, *lse, softmax_scale, &d); err.failure()) return err;
  if (auto err = ffi_args::check_cpu_support("forward", d); err.failure()) return err;
  cpu::attention_forward(element_type(d.dtype), cpu_shape(d), {static_cast<float>(softmax_scale), causal},
                         q.untyped_data(), k.untyped_data(), v.untyped_data(), o->untyped_data(),
                         lse->typed_data());
  return ffi::Error::Success();
}

}  // namespace
}  // namespace jax_fa4::ffi_cpu

XLA_FFI_DEFINE_HANDLER_SYMBOL(Fa4FwdCpu, jax_fa4::ffi_cpu::Fa4FwdCpuImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::AnyBuffer>()           // q [b, sq, hq, d]
                                  .Arg<ffi::AnyBuffer>()           // k [b, sk, hkv, d]
                                  .Arg<ffi::AnyBuffer>()           // v [b, sk, hkv, dv]
                                  .Ret<ffi::AnyBuffer>()           // o [b, sq, hq, dv]
                                  .Ret<ffi::Buffer<ffi::F32>>()    // lse [b, hq, sq]
                                  .Attr<double>("softmax_scale")  // multiplies q.k
                                  .Attr<bool>("causal"));         // bottom-right aligned
