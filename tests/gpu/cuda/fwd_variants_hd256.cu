// The standalone harness's extra forward kernel variants for head dim 256 (bf16 only; the library,
// cuda/hopper/fwd_hd256.cu, builds fwd_default_variant(256) for bf16 and fp16). Not part of the pip
// build: CMake globs cuda/hopper/*.cu only. Variants: fwd_config.cuh.
#include "hopper/fwd_kernel.cuh"

namespace fa4::hopper {
namespace {
// The default variant is the library's instantiation (bf16 and fp16, fwd_hd256.cu); not built twice.
template <int V>
std::string run(const FwdProblem& p, cudaStream_t stream) {
  if constexpr (V == fwd_default_variant(256)) {
    return launch_fwd_hd256(p, stream);
  } else {
    return launch_fwd_head_dim_bf16<256, V>(p, stream);
  }
}
}  // namespace

std::string launch_fwd_hd256_variant(const FwdProblem& p, cudaStream_t stream, int variant) {
  static_assert(fwd_variant_count(256) == 11, "keep this switch in step with fwd_config.cuh");
  switch (variant) {
    case 0: return run<0>(p, stream);
    case 1: return run<1>(p, stream);
    case 2: return run<2>(p, stream);
    case 3: return run<3>(p, stream);
    case 4: return run<4>(p, stream);
    case 5: return run<5>(p, stream);
    case 7: return run<7>(p, stream);  // 5 + TrimFirstPv (fwd v13)
    case 8: return run<8>(p, stream);  // 5 + WgSkip under the mask without KWaitFirst (fwd v13)
    case 9: return run<9>(p, stream);  // 7 + Lpt under the mask (session 9)
    case 10: return run<10>(p, stream);  // 4 + TrimFirst without the mask, 9 under it
    default: return "hd256 has no forward variant " + std::to_string(variant);
  }
}
}  // namespace fa4::hopper
