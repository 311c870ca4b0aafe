// FFI handler jax_fa4_fwd_cpu: (q, k, v, q_lengths, kv_lengths, q_segment_ids, kv_segment_ids,
// sinks) -> (o, lse) on the CPU. Absent optional operands are [0] buffers (ffi/args.h).
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

// The CPU kernels' options from the decoded variant (same window convention: the FFI handlers
// saturate bounds at +-kWindowUnbounded, which both back ends read as unbounded / empty).
cpu::AttentionOptions cpu_options(double softmax_scale, bool causal, const fa4::hopper::AttentionVariant& v) {
  static_assert(cpu::kWindowUnbounded == fa4::hopper::kWindowUnbounded, "one window convention");
  cpu::AttentionOptions o{static_cast<float>(softmax_scale), causal};
  o.window_left = v.window_left;
  o.window_right = v.window_right;
  o.softcap = v.softcap;
  o.q_lengths = v.q_lengths;
  o.kv_lengths = v.kv_lengths;
  o.q_segment_ids = v.q_segment_ids;
  o.kv_segment_ids = v.kv_segment_ids;
  o.sinks = v.sinks;
  return o;
}

namespace {

ffi::Error Fa4FwdCpuImpl(ffi::AnyBuffer q, ffi::AnyBuffer k, ffi::AnyBuffer v, ffi::AnyBuffer q_lengths,
                         ffi::AnyBuffer kv_lengths, ffi::AnyBuffer q_segment_ids, ffi::AnyBuffer kv_segment_ids,
                         ffi::AnyBuffer sinks, ffi::Result<ffi::AnyBuffer> o,
                         ffi::Result<ffi::Buffer<ffi::F32>> lse, double softmax_scale, bool causal,
                         int64_t window_left, int64_t window_right, double softcap) {
  const char* pass = "forward";
  ffi_args::Dims d{};
  if (auto err = ffi_args::check_fwd(q, k, v, *o, *lse, softmax_scale, &d); err.failure()) return err;
  if (auto err = ffi_args::check_cpu_support(pass, d); err.failure()) return err;
  const ffi_args::VariantOperands ops{&q_lengths, &kv_lengths, &q_segment_ids, &kv_segment_ids, &sinks};
  fa4::hopper::AttentionVariant variant;
  if (auto err = ffi_args::decode_variant(pass, d, ops, window_left, window_right, softcap, &variant);
      err.failure())
    return err;
  cpu::attention_forward(element_type(d.dtype), cpu_shape(d), cpu_options(softmax_scale, causal, variant),
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
                                  .Arg<ffi::AnyBuffer>()           // q_lengths int32 [b] or [0]
                                  .Arg<ffi::AnyBuffer>()           // kv_lengths int32 [b] or [0]
                                  .Arg<ffi::AnyBuffer>()           // q_segment_ids int32 [b, sq] or [0]
                                  .Arg<ffi::AnyBuffer>()           // kv_segment_ids int32 [b, sk] or [0]
                                  .Arg<ffi::AnyBuffer>()           // sinks float32 [b, hq] or [0]
                                  .Ret<ffi::AnyBuffer>()           // o [b, sq, hq, dv]
                                  .Ret<ffi::Buffer<ffi::F32>>()    // lse [b, hq, sq]
                                  .Attr<double>("softmax_scale")  // multiplies q.k
                                  .Attr<bool>("causal")           // right bound min(window_right, 0)
                                  .Attr<int64_t>("window_left")   // >= 1 << 30: unbounded
                                  .Attr<int64_t>("window_right")  // >= 1 << 30: unbounded
                                  .Attr<double>("softcap"));      // 0: none
