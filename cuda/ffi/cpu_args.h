// Decoding and checking of the FFI buffers shared by the CPU forward and backward handlers.
#pragma once

#include <cmath>
#include <optional>
#include <string>

#include "cpu/attention_cpu.h"
#include "ffi/ffi_text.h"
#include "xla/ffi/api/ffi.h"

namespace jax_fa4::ffi_cpu {

namespace ffi = xla::ffi;

using ffi_text::dims_str;

inline std::optional<cpu::ElementType> element_type(ffi::DataType t) {
  switch (t) {
    case ffi::DataType::F32:
      return cpu::ElementType::kF32;
    case ffi::DataType::BF16:
      return cpu::ElementType::kBF16;
    case ffi::DataType::F16:
      return cpu::ElementType::kF16;
    default:
      return std::nullopt;
  }
}

inline ffi::Error invalid(const std::string& msg) {
  return ffi::Error::InvalidArgument("jax_fa4 (cpu): " + msg);
}

// Reads the shape from q [b, sq, hq, d], k [b, sk, hkv, d], v [b, sk, hkv, dv]; checks they agree.
inline ffi::Error decode_shape(const ffi::AnyBuffer& q, const ffi::AnyBuffer& k,
                               const ffi::AnyBuffer& v, cpu::AttentionShape* s,
                               cpu::ElementType* type) {
  const auto qd = q.dimensions(), kd = k.dimensions(), vd = v.dimensions();
  if (qd.size() != 4 || kd.size() != 4 || vd.size() != 4)
    return invalid("q, k, v must have rank 4 [batch, seq, heads, head_dim]; got q " +
                   dims_str(qd) + ", k " + dims_str(kd) + ", v " + dims_str(vd));
  if (q.element_type() != k.element_type() || q.element_type() != v.element_type())
    return invalid("q, k and v must share one dtype");
  auto t = element_type(q.element_type());
  if (!t) return invalid("dtype must be float32, bfloat16 or float16");
  *type = *t;
  *s = cpu::AttentionShape{qd[0], qd[1], kd[1], qd[2], kd[2], qd[3], vd[3]};
  if (kd[0] != qd[0] || vd[0] != qd[0] || vd[1] != kd[1] || vd[2] != kd[2] || kd[3] != qd[3])
    return invalid("inconsistent shapes q " + dims_str(qd) + ", k " + dims_str(kd) +
                   ", v " + dims_str(vd));
  if (s->head_dim < 1 || s->head_dim > 256 || s->head_dim_v < 1 || s->head_dim_v > 256)
    return invalid("head dims must be in 1..256; got q/k " + std::to_string(s->head_dim) +
                   ", v " + std::to_string(s->head_dim_v));
  if (s->heads_kv <= 0 || s->heads_q % s->heads_kv != 0)
    return invalid("heads_q must be a positive multiple of heads_kv; got " +
                   std::to_string(s->heads_q) + " and " + std::to_string(s->heads_kv));
  return ffi::Error::Success();
}

inline ffi::Error check_dims(const char* name, ffi::Span<const int64_t> got,
                             std::initializer_list<int64_t> want) {
  bool ok = got.size() == want.size();
  size_t i = 0;
  for (int64_t w : want) ok = ok && got[i++] == w;
  if (!ok) {
    std::string w = "[";
    i = 0;
    for (int64_t x : want) w += (i++ ? ", " : "") + std::to_string(x);
    return invalid(std::string(name) + " has shape " + dims_str(got) + ", expected " + w +
                   "]");
  }
  return ffi::Error::Success();
}

inline ffi::Error check_scale(double scale) {
  if (!(std::isfinite(scale) && scale > 0.0))
    return invalid("softmax_scale must be finite and positive; got " + std::to_string(scale));
  return ffi::Error::Success();
}

}  // namespace jax_fa4::ffi_cpu
