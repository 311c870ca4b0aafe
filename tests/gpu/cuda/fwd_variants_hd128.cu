// The standalone harness's extra forward kernel variants for head dim 128 (bf16 only; the library,
// cuda/hopper/fwd_hd128.cu, builds fwd_default_variant(128) for bf16 and fp16). Not part of the pip
// build: CMake globs cuda/hopper/*.cu only. Variants: fwd_config.cuh.
#include "hopper/fwd_kernel.cuh"

namespace fa4::hopper {
namespace {
// The default variant is the library's entry point (bf16 and fp16, fwd_hd128.cu), which since
// session 9 takes the persistent V25 when seq_k <= fwd_short_seq_max_k(128, causal) (2048 without
// the mask, 4096 under it) and V17 above: so a timing of "variant 17" at those lengths is V25's.
template <int V>
std::string run(const FwdProblem& p, cudaStream_t stream) {
  if constexpr (V == fwd_default_variant(128)) {
    return launch_fwd_hd128(p, stream);
  } else {
    return launch_fwd_head_dim_bf16<128, V>(p, stream);
  }
}
}  // namespace

std::string launch_fwd_hd128_variant(const FwdProblem& p, cudaStream_t stream, int variant) {
  static_assert(fwd_variant_count(128) == 26, "keep this switch in step with fwd_config.cuh");
  switch (variant) {
    case 0: return run<0>(p, stream);
    case 1: return run<1>(p, stream);
    case 2: return run<2>(p, stream);
    case 3: return run<3>(p, stream);
    case 4: return run<4>(p, stream);
    case 5: return run<5>(p, stream);
    case 6: return run<6>(p, stream);
    case 7: return run<7>(p, stream);
    case 8: return run<8>(p, stream);
    case 9: return run<9>(p, stream);
    case 10: return run<10>(p, stream);
    case 11: return run<11>(p, stream);
    case 12: return run<12>(p, stream);
    case 13: return run<13>(p, stream);
    case 14: return run<14>(p, stream);
    case 15: return run<15>(p, stream);  // 0 + PhaseClocks (instrumentation)
    case 17: return run<17>(p, stream);  // 14 + TrimFirstPv (fwd v13)
    case 18: return run<18>(p, stream);  // 13 + PhaseClocks (instrumentation)
    case 21: return run<21>(p, stream);  // 6 + PhaseClocks (instrumentation)
    case 22: return run<22>(p, stream);  // 8 + PhaseClocks (instrumentation)
    case 23: return run<23>(p, stream);  // 6 + 2 Q buffers
    case 24: return run<24>(p, stream);  // 23 + PhaseClocks (instrumentation)
    case 25: return run<25>(p, stream);  // the persistent 128x128 kernel under both masks (session 9)
    default: return "hd128 has no forward variant " + std::to_string(variant);
  }
}

// Variants 15, 18, 21, 22 and 24's phase clocks (this translation unit's g_fwd_phase_clocks; one variant per
// timing row), read and cleared.
std::string fwd_hd128_phase_clocks(unsigned long long* out) { return fwd_phase_clocks_take(out); }
}  // namespace fa4::hopper
