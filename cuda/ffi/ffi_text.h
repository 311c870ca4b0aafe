// How the handlers name shapes and dtypes in their error messages (CPU and CUDA alike).
#pragma once

#include <cstdio>
#include <string>

#include "xla/ffi/api/ffi.h"

namespace jax_fa4::ffi_text {

inline std::string dims_str(xla::ffi::Span<const int64_t> d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

// A double as the shortest text that names it (9 significant digits; "inf", "nan" as they are).
inline std::string num_str(double x) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.9g", x);
  return buf;
}

inline std::string dtype_str(xla::ffi::DataType t) {
  switch (t) {
    case xla::ffi::DataType::BF16: return "bfloat16";
    case xla::ffi::DataType::F16: return "float16";
    case xla::ffi::DataType::F32: return "float32";
    case xla::ffi::DataType::F64: return "float64";
    case xla::ffi::DataType::U8: return "uint8";
    case xla::ffi::DataType::S8: return "int8";
    case xla::ffi::DataType::S16: return "int16";
    case xla::ffi::DataType::S32: return "int32";
    case xla::ffi::DataType::S64: return "int64";
    case xla::ffi::DataType::U32: return "uint32";
    case xla::ffi::DataType::U64: return "uint64";
    case xla::ffi::DataType::PRED: return "bool";
    default: return "dtype code " + std::to_string(static_cast<int>(t));
  }
}

}  // namespace jax_fa4::ffi_text
