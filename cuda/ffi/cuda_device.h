// The device check every CUDA handler runs first: the kernels are sm_90a (Hopper) code only.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "xla/ffi/api/ffi.h"

namespace jax_fa4 {

// Success on a compute capability 9.0 device; otherwise an FFI error naming what was found.
inline xla::ffi::Error check_hopper_device() {
  namespace ffi = xla::ffi;
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e != cudaSuccess)
    return ffi::Error::Internal(std::string("cudaGetDevice: ") + cudaGetErrorString(e));
  int major = 0, minor = 0;
  e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
  if (e != cudaSuccess)
    return ffi::Error::Internal(std::string("cudaDeviceGetAttribute: ") + cudaGetErrorString(e));
  if (major != 9 || minor != 0) {
    return ffi::Error(ffi::ErrorCode::kUnimplemented,
                      "jax_fa4's CUDA kernels need a Hopper GPU (compute capability 9.0, sm_90a); "
                      "device " + std::to_string(dev) + " is compute capability " +
                          std::to_string(major) + "." + std::to_string(minor));
  }
  return ffi::Error::Success();
}

}  // namespace jax_fa4
