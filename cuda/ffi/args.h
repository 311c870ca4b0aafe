// The one argument check of each pass, shared by its CPU and CUDA handlers: it decodes the shape
// from the buffers and checks everything both back ends require (ranks, one dtype, consistent
// shapes, GQA heads, the outputs' shapes, the softmax scale). Each back end then checks only what
// it alone limits (dtypes, head dims: check_cpu_support / check_cuda_support). The variant
// operands and attributes (lengths, segment ids and ranges, sinks, window, soft cap) have one
// decode and check too (decode_variant), whose AttentionVariant both back ends take.
#pragma once

#include <cmath>
#include <initializer_list>
#include <string>

#include "ffi/ffi_text.h"
#include "hopper/common/problem.h"
#include "xla/ffi/api/ffi.h"

namespace jax_fa4::ffi_args {

namespace ffi = xla::ffi;
using ffi_text::dims_str;
using ffi_text::dtype_str;

// q [batch, seq_q, heads_q, head_dim], k [batch, seq_k, heads_kv, head_dim],
// v [batch, seq_k, heads_kv, head_dim_v]; dtype is q's (shared by every 2-byte/4-byte tensor).
struct Dims {
  int64_t batch, seq_q, seq_k, heads_q, heads_kv, head_dim, head_dim_v;
  ffi::DataType dtype;
};

inline ffi::Error invalid(const char* pass, const std::string& msg) {
  return ffi::Error::InvalidArgument(std::string("jax_fa4 ") + pass + ": " + msg);
}

inline bool same_dims(ffi::Span<const int64_t> got, std::initializer_list<int64_t> want) {
  if (got.size() != want.size()) return false;
  size_t i = 0;
  for (int64_t w : want) {
    if (got[i++] != w) return false;
  }
  return true;
}

inline std::string dims_str(std::initializer_list<int64_t> d) {
  std::string s = "[";
  size_t i = 0;
  for (int64_t x : d) s += (i++ ? ", " : "") + std::to_string(x);
  return s + "]";
}

struct Named {
  const char* name;
  ffi::DataType dtype;
  ffi::Span<const int64_t> dims;
};

inline ffi::Error check_shape(const char* pass, const Named& t, std::initializer_list<int64_t> want) {
  if (!same_dims(t.dims, want))
    return invalid(pass, std::string(t.name) + " has shape " + dims_str(t.dims) + ", expected " + dims_str(want));
  return ffi::Error::Success();
}

// q, k, v: rank 4, one dtype, consistent batch / seq_k / heads_kv / head_dim; heads_q a multiple
// of heads_kv (heads_kv > 0 unless heads_q == 0).
inline ffi::Error decode_qkv(const char* pass, const ffi::AnyBuffer& q, const ffi::AnyBuffer& k,
                             const ffi::AnyBuffer& v, Dims* d) {
  const auto qd = q.dimensions(), kd = k.dimensions(), vd = v.dimensions();
  if (qd.size() != 4 || kd.size() != 4 || vd.size() != 4)
    return invalid(pass, "q, k, v must have rank 4 [batch, seq, heads, head_dim]; got q " + dims_str(qd) + ", k " +
                             dims_str(kd) + ", v " + dims_str(vd));
  const ffi::DataType t = q.element_type();
  if (k.element_type() != t || v.element_type() != t)
    return invalid(pass, "q, k and v must share one dtype; got q " + dtype_str(t) + ", k " +
                             dtype_str(k.element_type()) + ", v " + dtype_str(v.element_type()));
  *d = Dims{qd[0], qd[1], kd[1], qd[2], kd[2], qd[3], vd[3], t};
  if (kd[0] != d->batch || vd[0] != d->batch || vd[1] != d->seq_k || vd[2] != d->heads_kv || kd[3] != d->head_dim)
    return invalid(pass, "k and v must be [batch, seq_k, heads_kv, head_dim] matching q " + dims_str(qd) +
                             "; got k " + dims_str(kd) + ", v " + dims_str(vd));
  if (d->heads_kv <= 0 ? d->heads_q != 0 : d->heads_q % d->heads_kv != 0)
    return invalid(pass, "heads_q (" + std::to_string(d->heads_q) + ") must be a multiple of heads_kv (" +
                             std::to_string(d->heads_kv) + ")");
  return ffi::Error::Success();
}

inline ffi::Error check_scale(const char* pass, double scale) {
  if (!(std::isfinite(scale) && scale > 0.0))
    return invalid(pass, "softmax_scale must be positive and finite; got " + ffi_text::num_str(scale));
  return ffi::Error::Success();
}

inline ffi::Error check_same_dtype(const char* pass, const Dims& d, std::initializer_list<Named> ts) {
  for (const Named& t : ts) {
    if (t.dtype != d.dtype)
      return invalid(pass, std::string(t.name) + " must have q's dtype " + dtype_str(d.dtype) + "; got " +
                               dtype_str(t.dtype));
  }
  return ffi::Error::Success();
}

// The forward: (q, k, v) -> (o [b, sq, hq, dv] in q's dtype, lse float32 [b, hq, sq]).
inline ffi::Error check_fwd(const ffi::AnyBuffer& q, const ffi::AnyBuffer& k, const ffi::AnyBuffer& v,
                            const ffi::AnyBuffer& o, const ffi::Buffer<ffi::F32>& lse, double softmax_scale,
                            Dims* d) {
  const char* pass = "forward";
  if (auto err = decode_qkv(pass, q, k, v, d); err.failure()) return err;
  if (auto err = check_scale(pass, softmax_scale); err.failure()) return err;
  const Named on{"o", o.element_type(), o.dimensions()};
  if (auto err = check_same_dtype(pass, *d, {on}); err.failure()) return err;
  if (auto err = check_shape(pass, on, {d->batch, d->seq_q, d->heads_q, d->head_dim_v}); err.failure()) return err;
  return check_shape(pass, {"lse", ffi::DataType::F32, lse.dimensions()}, {d->batch, d->heads_q, d->seq_q});
}

// The backward: (q, k, v, o, lse, do, dlse) -> (dq like q, dk like k, dv like v).
inline ffi::Error check_bwd(const ffi::AnyBuffer& q, const ffi::AnyBuffer& k, const ffi::AnyBuffer& v,
                            const ffi::AnyBuffer& o, const ffi::Buffer<ffi::F32>& lse, const ffi::AnyBuffer& d_o,
                            const ffi::Buffer<ffi::F32>& dlse, const ffi::AnyBuffer& dq, const ffi::AnyBuffer& dk,
                            const ffi::AnyBuffer& dv, double softmax_scale, Dims* d) {
  const char* pass = "backward";
  if (auto err = decode_qkv(pass, q, k, v, d); err.failure()) return err;
  if (auto err = check_scale(pass, softmax_scale); err.failure()) return err;
  const Named on{"o", o.element_type(), o.dimensions()}, don{"do", d_o.element_type(), d_o.dimensions()},
      dqn{"dq", dq.element_type(), dq.dimensions()}, dkn{"dk", dk.element_type(), dk.dimensions()},
      dvn{"dv", dv.element_type(), dv.dimensions()};
  if (auto err = check_same_dtype(pass, *d, {on, don, dqn, dkn, dvn}); err.failure()) return err;
  const std::initializer_list<int64_t> o_shape = {d->batch, d->seq_q, d->heads_q, d->head_dim_v};
  const std::initializer_list<int64_t> vec_shape = {d->batch, d->heads_q, d->seq_q};
  if (auto err = check_shape(pass, on, o_shape); err.failure()) return err;
  if (auto err = check_shape(pass, don, o_shape); err.failure()) return err;
  if (auto err = check_shape(pass, {"lse", ffi::DataType::F32, lse.dimensions()}, vec_shape); err.failure()) return err;
  if (auto err = check_shape(pass, {"dlse", ffi::DataType::F32, dlse.dimensions()}, vec_shape); err.failure())
    return err;
  if (auto err = check_shape(pass, dqn, {d->batch, d->seq_q, d->heads_q, d->head_dim}); err.failure()) return err;
  if (auto err = check_shape(pass, dkn, {d->batch, d->seq_k, d->heads_kv, d->head_dim}); err.failure()) return err;
  return check_shape(pass, dvn, {d->batch, d->seq_k, d->heads_kv, d->head_dim_v});
}

// The Hopper launchers' problem shape (check_cuda_support has admitted the dtype) with its
// variant (decode_variant).
inline fa4::hopper::ProblemShape hopper_shape(const Dims& d, double softmax_scale, bool causal,
                                              const fa4::hopper::AttentionVariant& variant) {
  return {d.batch,
          d.seq_q,
          d.seq_k,
          d.heads_q,
          d.heads_kv,
          d.head_dim,
          d.dtype == ffi::DataType::BF16 ? fa4::hopper::Dtype::kBf16 : fa4::hopper::Dtype::kF16,
          static_cast<float>(softmax_scale),
          causal,
          variant};
}

// ---------------------------------------------------------------------------------------------
// The variant operands (docs: the attention variants). The custom calls have a fixed arity: an
// absent operand is a rank-1 buffer of zero elements (shape [0]) of its dtype, a present one has
// its full shape. decode_variant checks each against the problem's dims and fills the
// AttentionVariant both back ends take (pointers null where absent).
// ---------------------------------------------------------------------------------------------

// The operands of one call; null where the pass has no such operand (the backward has no sinks,
// the CPU handlers no segment ranges).
struct VariantOperands {
  const ffi::AnyBuffer* q_lengths = nullptr;
  const ffi::AnyBuffer* kv_lengths = nullptr;
  const ffi::AnyBuffer* q_segment_ids = nullptr;
  const ffi::AnyBuffer* kv_segment_ids = nullptr;
  const ffi::AnyBuffer* sinks = nullptr;
  const ffi::AnyBuffer* q_segment_ranges = nullptr;
  const ffi::AnyBuffer* kv_segment_ranges = nullptr;
};

// A window attribute (int64 in the FFI) as the kernels' int: a magnitude of kWindowUnbounded or
// more saturates there (the sign kept), so "unbounded" survives and no bound overflows an int.
inline int clamp_window(int64_t w) {
  constexpr int64_t u = fa4::hopper::kWindowUnbounded;
  return static_cast<int>(w >= u ? u : w <= -u ? -u : w);
}

inline bool is_absent(const ffi::AnyBuffer& b) {
  const auto dd = b.dimensions();
  return dd.size() == 1 && dd[0] == 0;
}

// Checks one optional operand: absent ([0]) or exactly dtype `want_type` of shape `want`. On
// success *present says which. `what` names the expected layout in the message ("[batch]").
inline ffi::Error check_optional(const char* pass, const char* name, const ffi::AnyBuffer& b,
                                 ffi::DataType want_type, const char* what, std::initializer_list<int64_t> want,
                                 bool* present) {
  *present = false;
  if (is_absent(b) && b.element_type() == want_type) return ffi::Error::Success();
  if (b.element_type() == want_type && same_dims(b.dimensions(), want)) {
    *present = true;
    return ffi::Error::Success();
  }
  return invalid(pass, std::string(name) + " must be " + dtype_str(want_type) + " " + what + " = " + dims_str(want) +
                           " or absent (" + dtype_str(want_type) + " [0]); got " + dtype_str(b.element_type()) +
                           " " + dims_str(b.dimensions()));
}

// A present operand's data. A present operand of zero elements (batch or seq 0) may come with a
// null pointer; presence is what the kernels test, so it gets a non-null one that nothing reads
// (every loop over it runs zero times).
template <typename T>
inline const T* present_data(const ffi::AnyBuffer& b) {
  static const T kNothing[1] = {};
  const void* p = b.untyped_data();
  return p ? static_cast<const T*>(p) : kNothing;
}

inline int64_t segment_chunks(int64_t seq) {
  return (seq + fa4::hopper::kSegmentChunk - 1) / fa4::hopper::kSegmentChunk;
}

// The variant of one call: the operands checked against d, the attributes (window bounds may be
// negative; >= 1 << 30 is unbounded; softcap 0 = none, else positive and finite) into *v.
inline ffi::Error decode_variant(const char* pass, const Dims& d, const VariantOperands& ops, int64_t window_left,
                                 int64_t window_right, double softcap, fa4::hopper::AttentionVariant* v) {
  using ffi::DataType;
  *v = fa4::hopper::AttentionVariant{};
  if (!(std::isfinite(softcap) && softcap >= 0.0))
    return invalid(pass, "softcap must be 0 (none) or positive and finite; got " + ffi_text::num_str(softcap));
  v->window_left = clamp_window(window_left);
  v->window_right = clamp_window(window_right);
  v->softcap = static_cast<float>(softcap);
  if (softcap > 0.0 && !(v->softcap > 0.f && std::isfinite(v->softcap)))
    return invalid(pass, "softcap " + ffi_text::num_str(softcap) + " is not representable as a positive float32");
  bool present = false;
  if (ops.q_lengths) {
    if (auto e = check_optional(pass, "q_lengths", *ops.q_lengths, DataType::S32, "[batch]", {d.batch}, &present);
        e.failure())
      return e;
    if (present) v->q_lengths = present_data<int32_t>(*ops.q_lengths);
  }
  if (ops.kv_lengths) {
    if (auto e = check_optional(pass, "kv_lengths", *ops.kv_lengths, DataType::S32, "[batch]", {d.batch}, &present);
        e.failure())
      return e;
    if (present) v->kv_lengths = present_data<int32_t>(*ops.kv_lengths);
  }
  bool q_ids = false, kv_ids = false;
  if (ops.q_segment_ids) {
    if (auto e = check_optional(pass, "q_segment_ids", *ops.q_segment_ids, DataType::S32, "[batch, seq_q]",
                                {d.batch, d.seq_q}, &q_ids);
        e.failure())
      return e;
  }
  if (ops.kv_segment_ids) {
    if (auto e = check_optional(pass, "kv_segment_ids", *ops.kv_segment_ids, DataType::S32, "[batch, seq_k]",
                                {d.batch, d.seq_k}, &kv_ids);
        e.failure())
      return e;
  }
  if (q_ids != kv_ids)
    return invalid(pass, std::string("q_segment_ids and kv_segment_ids must both be present or both absent; got ") +
                             (q_ids ? "q_segment_ids only" : "kv_segment_ids only"));
  if (q_ids) {
    v->q_segment_ids = present_data<int32_t>(*ops.q_segment_ids);
    v->kv_segment_ids = present_data<int32_t>(*ops.kv_segment_ids);
  }
  // The 64-row chunk ranges (CUDA handlers): present exactly when the ids are.
  if (ops.q_segment_ranges || ops.kv_segment_ranges) {
    if (!ops.q_segment_ranges || !ops.kv_segment_ranges)
      return invalid(pass, "internal: a handler passed one segment range operand without the other");
    bool qr = false, kr = false;
    if (auto e = check_optional(pass, "q_segment_ranges", *ops.q_segment_ranges, DataType::S32,
                                "[batch, ceil(seq_q / 64), 2]", {d.batch, segment_chunks(d.seq_q), 2}, &qr);
        e.failure())
      return e;
    if (auto e = check_optional(pass, "kv_segment_ranges", *ops.kv_segment_ranges, DataType::S32,
                                "[batch, ceil(seq_k / 64), 2]", {d.batch, segment_chunks(d.seq_k), 2}, &kr);
        e.failure())
      return e;
    if (qr != q_ids || kr != q_ids)
      return invalid(pass, std::string("q_segment_ranges and kv_segment_ranges must be present exactly when the "
                                       "segment ids are (ids ") +
                               (q_ids ? "present" : "absent") + "; ranges: q " + (qr ? "present" : "absent") +
                               ", kv " + (kr ? "present" : "absent") + ")");
    if (q_ids) {
      v->q_segment_ranges = present_data<int32_t>(*ops.q_segment_ranges);
      v->kv_segment_ranges = present_data<int32_t>(*ops.kv_segment_ranges);
    }
  }
  if (ops.sinks) {
    if (auto e = check_optional(pass, "sinks", *ops.sinks, DataType::F32, "[batch, heads_q]", {d.batch, d.heads_q},
                                &present);
        e.failure())
      return e;
    if (present) v->sinks = present_data<float>(*ops.sinks);
  }
  return ffi::Error::Success();
}

// What the CPU kernels take: float32, bfloat16 or float16; head dims 1..256 (v's may differ).
inline ffi::Error check_cpu_support(const char* pass, const Dims& d) {
  if (d.dtype != ffi::DataType::F32 && d.dtype != ffi::DataType::BF16 && d.dtype != ffi::DataType::F16)
    return invalid(pass, "the CPU kernels support float32, bfloat16 and float16; q is " + dtype_str(d.dtype));
  if (d.head_dim < 1 || d.head_dim > 256 || d.head_dim_v < 1 || d.head_dim_v > 256)
    return invalid(pass, "the CPU kernels support head dims 1..256; got q/k " + std::to_string(d.head_dim) +
                             ", v " + std::to_string(d.head_dim_v));
  if (d.heads_kv <= 0)
    return invalid(pass, "heads_q must be a positive multiple of heads_kv; got " + std::to_string(d.heads_q) +
                             " and " + std::to_string(d.heads_kv));
  return ffi::Error::Success();
}

// What the Hopper kernels take: bfloat16 or float16; one head dim of the set they are built for,
// shared by q, k and v.
inline ffi::Error check_cuda_support(const char* pass, const Dims& d) {
  if (d.dtype != ffi::DataType::BF16 && d.dtype != ffi::DataType::F16)
    return invalid(pass, "the CUDA kernels support bfloat16 and float16; q is " + dtype_str(d.dtype));
  if (!fa4::hopper::hopper_head_dim_supported(d.head_dim) || d.head_dim_v != d.head_dim)
    return invalid(pass, "head_dim " + std::to_string(d.head_dim) + " (v: " + std::to_string(d.head_dim_v) +
                             ") is not supported by the CUDA kernels (supported: " +
                             fa4::hopper::hopper_head_dims_text() + ", the same for q, k and v)");
  return ffi::Error::Success();
}

}  // namespace jax_fa4::ffi_args
