// FFI handler jax_fa4_bwd_cpu: (q, k, v, o, lse, do, dlse, q_lengths, kv_lengths, q_segment_ids,
// kv_segment_ids) -> (dq, dk, dv) on the CPU. Absent optional operands are [0] buffers
// (ffi/args.h). No sinks: the lse already includes them (cuda/cpu/attention_cpu.h).
// The `deterministic` attribute is accepted for symmetry with jax_fa4_bwd_cuda and ignored: the
// CPU backward is always deterministic (cuda/cpu/attention_cpu.cc: each dq block and each dk/dv
// block is one task that sums in a fixed order, no atomics, whatever the thread count), so both
// values give the same bits.
#include "cpu/attention_cpu.h"
#include "ffi/args.h"
#include "ffi/handlers.h"

namespace ffi = xla::ffi;

namespace jax_fa4::ffi_cpu {

cpu::ElementType element_type(ffi::DataType t);           // fwd_cpu.cc
cpu::AttentionShape cpu_shape(const ffi_args::Dims& d);  // fwd_cpu.cc
cpu::AttentionOptions cpu_options(double softmax_scale, bool causal,
                                  const fa4::hopper::AttentionVariant& v);  // fwd_cpu.cc

namespace {

ffi::Error Fa4BwdCpuImpl(ffi::AnyBuffer q, ffi::AnyBuffer k, ffi::AnyBuffer v, ffi::AnyBuffer o,
                         ffi::Buffer<ffi::F32> lse, ffi::AnyBuffer d_o,
                         ffi::Buffer<ffi::F32> dlse, ffi::AnyBuffer q_lengths, ffi::AnyBuffer kv_lengths,
                         ffi::AnyBuffer q_segment_ids, ffi::AnyBuffer kv_segment_ids,
                         ffi::Result<ffi::AnyBuffer> dq, ffi::Result<ffi::AnyBuffer> dk,
                         ffi::Result<ffi::AnyBuffer> dv, double softmax_scale, bool causal,
                         int64_t window_left, int64_t window_right, double softcap, bool deterministic) {
  const char* pass = "backward";
  (void)deterministic;  // always deterministic here (see the top of this file)
  ffi_args::Dims d{};
  if (auto err = ffi_args::check_bwd(q, k, v, o, lse, d_o, dlse, *dq, *dk, *dv, softmax_scale, &d); err.failure())
    return err;
  if (auto err = ffi_args::check_cpu_support(pass, d); err.failure()) return err;
  const ffi_args::VariantOperands ops{&q_lengths, &kv_lengths, &q_segment_ids, &kv_segment_ids};
  fa4::hopper::AttentionVariant variant;
  if (auto err = ffi_args::decode_variant(pass, d, ops, window_left, window_right, softcap, &variant);
      err.failure())
    return err;
  const cpu::ElementType type = element_type(d.dtype);
  const cpu::AttentionShape s = cpu_shape(d);
  cpu::attention_backward(type, s, cpu_options(softmax_scale, causal, variant), q.untyped_data(),
                          k.untyped_data(), v.untyped_data(), o.untyped_data(), lse.typed_data(),
                          d_o.untyped_data(), dlse.typed_data(), dq->untyped_data(), dk->untyped_data(),
                          dv->untyped_data());
  return ffi::Error::Success();
}

}  // namespace
}  // namespace jax_fa4::ffi_cpu

XLA_FFI_DEFINE_HANDLER_SYMBOL(Fa4BwdCpu, jax_fa4::ffi_cpu::Fa4BwdCpuImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::AnyBuffer>()           // q [b, sq, hq, d]
                                  .Arg<ffi::AnyBuffer>()           // k [b, sk, hkv, d]
                                  .Arg<ffi::AnyBuffer>()           // v [b, sk, hkv, dv]
                                  .Arg<ffi::AnyBuffer>()           // o [b, sq, hq, dv]
                                  .Arg<ffi::Buffer<ffi::F32>>()    // lse [b, hq, sq]
                                  .Arg<ffi::AnyBuffer>()           // do [b, sq, hq, dv]
                                  .Arg<ffi::Buffer<ffi::F32>>()    // dlse [b, hq, sq]
                                  .Arg<ffi::AnyBuffer>()           // q_lengths int32 [b] or [0]
                                  .Arg<ffi::AnyBuffer>()           // kv_lengths int32 [b] or [0]
                                  .Arg<ffi::AnyBuffer>()           // q_segment_ids int32 [b, sq] or [0]
                                  .Arg<ffi::AnyBuffer>()           // kv_segment_ids int32 [b, sk] or [0]
                                  .Ret<ffi::AnyBuffer>()           // dq [b, sq, hq, d]
                                  .Ret<ffi::AnyBuffer>()           // dk [b, sk, hkv, d]
                                  .Ret<ffi::AnyBuffer>()           // dv [b, sk, hkv, dv]
                                  .Attr<double>("softmax_scale")  // multiplies q.k
                                  .Attr<bool>("causal")           // right bound min(window_right, 0)
                                  .Attr<int64_t>("window_left")   // >= 1 << 30: unbounded
                                  .Attr<int64_t>("window_right")  // >= 1 << 30: unbounded
                                  .Attr<double>("softcap")        // 0: none
                                  .Attr<bool>("deterministic"));  // ignored: always deterministic
