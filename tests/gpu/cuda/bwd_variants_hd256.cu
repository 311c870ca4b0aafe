// The standalone harness's extra backward kernel variants for head dim 256 (bf16 only; the library,
// cuda/hopper/bwd_hd256.cu, builds bwd_default_variant(256) for bf16 and fp16). Not part of the pip build:
// CMake globs cuda/hopper/*.cu only. Variant bits: 1 = PipelineScores, 2 = DqViaTma, 4 = DqInRing, 8 = Persistent,
// 16 = SplitSdP, 32 = ScoresAhead, 64 = WriterTiming (bwd_config.cuh).
#include "hopper/bwd_kernel.cuh"

namespace fa4::hopper {
namespace {
// The default variant (V4096, the 64 x 80 kernel) is the library's instantiation (bf16 and fp16,
// bwd_hd256.cu), which deterministic mode runs too (bwd_deterministic_variant(256) = 4096); the others
// (V788, the default in session 5; V20 before it; V0 and V4 with its deterministic writer as variant
// 132) are bf16-only here.
template <int V>
std::string run(const BwdProblem& p, const BwdWorkspace& ws, cudaStream_t stream) {
  if constexpr (V == bwd_default_variant(256)) {
    return launch_bwd_hd256(p, ws, stream);
  } else {
    return launch_bwd_head_dim_bf16<256, V>(p, ws, stream);
  }
}
}  // namespace

std::string launch_bwd_hd256_variant(const BwdProblem& p, const BwdWorkspace& ws, cudaStream_t stream, int variant) {
  switch (variant) {
    case 0: return run<0>(p, ws, stream);
    case 1: return run<1>(p, ws, stream);
    case 4: return run<4>(p, ws, stream);  // DqInRing (bwd v3)
    case 12: return run<12>(p, ws, stream);  // 4 + Persistent, dQ in 2 pieces (bwd v3)
    case 20: return run<20>(p, ws, stream);  // 4 + SplitSdP: S^T on WG 0, dP^T on WG 1, m64n64 (bwd v4)
    case 52: return run<52>(p, ws, stream);  // 20 + ScoresAhead: next scores during the dQ staging (bwd v4)
    case 68: return run<68>(p, ws, stream);  // 4 + WriterTiming: V4 with the writer's clock64 counters
    case 132: return run<132>(p, ws, stream);  // 4 + DetRingWriter: V4 with its deterministic writer
    case 788: return run<788>(p, ws, stream);  // 20 + StsmPds + UniformWarpgroup (V51's two changes; the library's in session 5)
    case 1024: return run<1024>(p, ws, stream);  // V0 + RedV4 (16-byte dQ atomics in fragment order; measurement)
    case 1808: return run<1808>(p, ws, stream);  // V788's schedule with RedV4 instead of DqInRing + writer warp
    case 4096: return run<4096>(p, ws, stream);  // 64 x 80 blocks, transposed dK/dV/dQ products, RedV4 (bwd_kv80.cuh; the library's since session 6)
    default: return "hd256 has no variant " + std::to_string(variant) + " (no DqViaTma: shared memory)";
  }
}

// Variant 68's writer counters (g_bwd_writer_clocks of this translation unit): copies the four
// sums [ring-barrier wait, wait_group.read, writer span, steps] into out and clears them.
std::string bwd_hd256_writer_clocks(unsigned long long* out) {
  cudaError_t e = cudaMemcpyFromSymbol(out, g_bwd_writer_clocks, 4 * sizeof(unsigned long long));
  const unsigned long long zero[4] = {0, 0, 0, 0};
  if (e == cudaSuccess) e = cudaMemcpyToSymbol(g_bwd_writer_clocks, zero, sizeof(zero));
  return e == cudaSuccess ? std::string() : std::string(cudaGetErrorString(e));
}
}  // namespace fa4::hopper
