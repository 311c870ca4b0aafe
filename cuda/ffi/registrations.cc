// The one Python extension: hands every FFI handler to jax_fa4/_ffi.py, keyed by platform.
#include <nanobind/nanobind.h>

#include <type_traits>

#include "ffi/handlers.h"

namespace nb = nanobind;

namespace {

template <typename T>
nb::capsule EncapsulateFfiHandler(T* fn) {
  static_assert(std::is_invocable_r_v<XLA_FFI_Error*, T, XLA_FFI_CallFrame*>,
                "an XLA FFI handler must take a call frame and return an error pointer");
  return nb::capsule(reinterpret_cast<void*>(fn));
}

nb::dict Registrations() {
  nb::dict cpu;
  cpu["jax_fa4_fwd_cpu"] = EncapsulateFfiHandler(Fa4FwdCpu);
  cpu["jax_fa4_bwd_cpu"] = EncapsulateFfiHandler(Fa4BwdCpu);
  nb::dict cuda;
#ifdef JAX_FA4_WITH_CUDA
  cuda["jax_fa4_fwd_cuda"] = EncapsulateFfiHandler(Fa4FwdCuda);
  // Fa4BwdCuda is built but not registered yet: its kernels pass the standalone check on an H200,
  // but its float32 workspace comes from XLA's FFI ScratchAllocator, which refused even 34 KB there
  // (RESOURCE_EXHAUSTED). Until the workspace becomes extra outputs of the custom call, jax.grad
  // on a GPU raises a clear NotImplementedError at trace time instead of failing at run time.
#endif
  nb::dict out;
  out["cpu"] = cpu;
  out["cuda"] = cuda;
  return out;
}

}  // namespace

NB_MODULE(_jax_fa4_ext, m) {
  m.doc() = "jax_fa4 XLA FFI handlers (CPU always, Hopper CUDA when built with nvcc)";
  m.def("registrations", &Registrations,
        "{platform: {target_name: capsule}} for jax.ffi.register_ffi_target");
#ifdef JAX_FA4_WITH_CUDA
  m.attr("built_with_cuda") = true;
#else
  m.attr("built_with_cuda") = false;
#endif
}
