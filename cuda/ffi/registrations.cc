// The one Python extension: hands every FFI handler to jax_fa4/_ffi.py, keyed by platform.
#include <nanobind/nanobind.h>

#include <cstdint>
#include <type_traits>

#include "ffi/handlers.h"
#ifdef JAX_FA4_WITH_CUDA
#include "hopper/bwd/workspace.h"
#include "hopper/decode/plan.h"
#include "hopper/fwd/schedule_model.h"
#endif

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
  // The forward's split-KV decode scratch (a 3rd result) and the backward's float32 workspace (a
  // 4th) are uint8 results of the custom calls, not XLA's FFI ScratchAllocator: that allocator
  // refused even 34 KB on the H200.
  cuda["jax_fa4_fwd_cuda"] = EncapsulateFfiHandler(Fa4FwdCuda);
  cuda["jax_fa4_bwd_cuda"] = EncapsulateFfiHandler(Fa4BwdCuda);
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
  m.def(
      "cuda_bwd_workspace_bytes",
      [](int64_t batch, int64_t seq_q, int64_t heads_q, int64_t head_dim) -> int64_t {
        if (batch < 0 || seq_q < 0 || heads_q < 0 || head_dim < 0)
          throw nb::value_error("cuda_bwd_workspace_bytes: dimensions must be non-negative");
        return static_cast<int64_t>(fa4::hopper::bwd_workspace_bytes(batch, seq_q, heads_q, head_dim));
      },
      nb::arg("batch"), nb::arg("seq_q"), nb::arg("heads_q"), nb::arg("head_dim"),
      "Bytes of the uint8 workspace result of jax_fa4_bwd_cuda (cuda/hopper/bwd/workspace.h)");
  m.def(
      "cuda_fwd_workspace_bytes",
      [](int64_t batch, int64_t seq_q, int64_t seq_k, int64_t heads_q, int64_t heads_kv,
         int64_t head_dim) -> int64_t {
        if (batch < 0 || seq_q < 0 || seq_k < 0 || heads_q < 0 || heads_kv < 0 || head_dim < 0)
          throw nb::value_error("cuda_fwd_workspace_bytes: dimensions must be non-negative");
        return static_cast<int64_t>(
            fa4::hopper::fwd_workspace_bytes(batch, seq_q, seq_k, heads_q, heads_kv, head_dim));
      },
      nb::arg("batch"), nb::arg("seq_q"), nb::arg("seq_k"), nb::arg("heads_q"), nb::arg("heads_kv"),
      nb::arg("head_dim"),
      "Bytes of the uint8 workspace result of jax_fa4_fwd_cuda (cuda/hopper/decode/plan.h; 0 for most shapes)");
  m.def(
      "cuda_fwd_persistent_section",
      [](int64_t seq_q, int64_t seq_k, int64_t pairs, int64_t kv_bytes_per_pair, int block_m, int block_n,
         int ctas) -> nb::tuple {
        if (seq_q < 0 || seq_k < 0 || pairs < 1 || kv_bytes_per_pair < 0 || block_m < 1 || block_n < 1 || ctas < 1)
          throw nb::value_error("cuda_fwd_persistent_section: sizes must be positive (lengths non-negative)");
        const fa4::hopper::FwdPersistentShape s{seq_q, seq_k, pairs, kv_bytes_per_pair, block_m, block_n, ctas};
        const int64_t section = fa4::hopper::fwd_persistent_section(s);
        return nb::make_tuple(section, fa4::hopper::fwd_persistent_busiest_cost(s, section));
      },
      nb::arg("seq_q"), nb::arg("seq_k"), nb::arg("pairs"), nb::arg("kv_bytes_per_pair"), nb::arg("block_m"),
      nb::arg("block_n"), nb::arg("ctas"),
      "(section, busiest CTA's modelled cost) the persistent causal forward picks (cuda/hopper/fwd/schedule_model.h)");
#else
  m.attr("built_with_cuda") = false;
#endif
}
