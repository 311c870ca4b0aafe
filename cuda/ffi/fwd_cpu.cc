// FFI handler jax_fa4_fwd_cpu: (q, k, v) -> (o, lse) on the CPU.
#include "cpu/attention_cpu.h"
#include "ffi/cpu_args.h"
#include "ffi/handlers.h"

namespace ffi = xla::ffi;

namespace jax_fa4::ffi_cpu {
namespace {

ffi::Error Fa4FwdCpuImpl(ffi::AnyBuffer q, ffi::AnyBuffer k, ffi::AnyBuffer v,
                         ffi::Result<ffi::AnyBuffer> o, ffi::Result<ffi::Buffer<ffi::F32>> lse,
                         double softmax_scale, bool causal) {
  cpu::AttentionShape s{};
  cpu::ElementType type{};
  if (auto err = decode_shape(q, k, v, &s, &type); err.failure()) return err;
  if (auto err = check_scale(softmax_scale); err.failure()) return err;
  if (o->element_type() != q.element_type()) return invalid("o must have q's dtype");
  if (auto err = check_dims("o", o->dimensions(), {s.batch, s.seq_q, s.heads_q, s.head_dim_v});
      err.failure())
    return err;
  if (auto err = check_dims("lse", lse->dimensions(), {s.batch, s.heads_q, s.seq_q});
      err.failure())
    return err;
  cpu::attention_forward(type, s, {static_cast<float>(softmax_scale), causal}, q.untyped_data(),
                         k.untyped_data(), v.untyped_data(), o->untyped_data(),
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
