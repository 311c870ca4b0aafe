// The standalone harness's extra forward kernel variants for head dim 64 (bf16 only; the library,
// cuda/hopper/fwd_hd64.cu, builds fwd_default_variant(64) for bf16 and fp16). Not part of the pip
// build: CMake globs cuda/hopper/*.cu only. Variants: fwd_config.cuh.
#include "hopper/fwd_kernel.cuh"

namespace fa4::hopper {
namespace {
// Variant 0 runs the library's entry point (bf16 and fp16, fwd_hd64.cu), which at hd64 takes the
// persistent V16 (V12 + causal WgSkip) when seq_k <= fwd_short_seq_max_k(64, causal) and V0 above
// (fwd_short_seq_variant): the checks of "variant 0" cover that dispatch. V12 / V16 here are the
// persistent kernels at every length (so a timing of "variant 0" below seq_k 4097 is V16's).
template <int V>
std::string run(const FwdProblem& p, cudaStream_t stream) {
  if constexpr (V == fwd_default_variant(64)) {
    return launch_fwd_hd64(p, stream);
  } else {
    return launch_fwd_head_dim_bf16<64, V>(p, stream);
  }
}
}  // namespace

std::string launch_fwd_hd64_variant(const FwdProblem& p, cudaStream_t stream, int variant) {
  static_assert(fwd_variant_count(64) == 17, "keep this switch in step with fwd_config.cuh");
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
    case 14: return run<14>(p, stream);  // 12 + PhaseClocks (instrumentation)
    case 16: return run<16>(p, stream);  // 12 + WgSkip under the mask (fwd v11; the library's below seq_k 4097)
    default: return "hd64 has no forward variant " + std::to_string(variant);
  }
}

// Variant 14's phase clocks (this translation unit's g_fwd_phase_clocks), read and cleared.
std::string fwd_hd64_phase_clocks(unsigned long long* out) { return fwd_phase_clocks_take(out); }
}  // namespace fa4::hopper
