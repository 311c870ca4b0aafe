// Host-only model of the variant backward's schedule (no GPU): for every CTA of the harness's
// variant suite (bwd_kernel_check.cu's exact inputs: its cases and its RNG replayed for both seed
// sequences, --variants-only and the default run) and of the causal window (4096, 0) 16k x 16k
// benchmark shape, per configuration geometry (hd64 128 x 128, hd128 64 x 128, hd256 64 x 80):
//   - the query-block range of each key block (bwd_variant_query_blocks: TileMask::row_span, then
//     in the default mode the segment narrowing) lies in [0, query blocks) and is (0, 0) when empty;
//     the loader, the consumers and the dQ writer all evaluate this one function with the same
//     arguments, so their step counts are group x (end - begin) alike;
//   - every visible (query, key) pair of the contract (variants-contract.md) lies in a visited
//     query block, and a step BwdVariantTile calls unmasked has every pair of its tile visible;
//   - deterministic mode: the ranks of bwd_dq_rank_variant (key blocks above n whose band range
//     holds m) are 0 .. k-1 over the k key blocks that visit m, descending in n, and a dispatch
//     model of the grid (x fastest, blockIdx.x -> key block last-first, 1 / 2 / 7 / 132 CTAs
//     resident, each CTA's steps in order waiting for its rank) finishes without a deadlock;
//   - built with AddressSanitizer, no read of the lengths, ids or chunk-range arrays leaves them.
// The real TileMask (common/mask.cuh, host side) answers the band questions; the warp-collective
// narrow_* and BwdVariantTile (device only) are mirrored serially (a lane-strided min / max
// reduced over the warp equals the serial one). -DMUTATE_RANK_NARROWED ranks by the narrowed
// range while the loops use the band's (a rank no key block produces): the dispatch model must
// then report deadlocks (it does).
// Build and run (any machine with nvcc; nothing is launched):
//   nvcc -std=c++17 -O1 --expt-relaxed-constexpr -Icuda -Itests/gpu/cuda \
//        -Xcompiler -fsanitize=address,-fopenmp tests/gpu/cuda/bwd_variant_schedule_check.cu \
//        -o /tmp/bwd_variant_schedule_check -lasan -lgomp && /tmp/bwd_variant_schedule_check
#define main harness_main
#include "bwd_kernel_check.cu"
#undef main
#include "hopper/bwd/heuristics.h"
#include "hopper/bwd/scheduler.cuh"
namespace fa4::hopper {
// Link stubs: this model never launches anything.
template <class Cfg>
std::string launch_bwd_config(const BwdProblem&, const BwdWorkspace&, cudaStream_t, const BwdSchedule&) { return "stub"; }
template std::string launch_bwd_config<BwdHd64>(const BwdProblem&, const BwdWorkspace&, cudaStream_t, const BwdSchedule&);
template std::string launch_bwd_config<BwdHd64Persistent>(const BwdProblem&, const BwdWorkspace&, cudaStream_t, const BwdSchedule&);
template std::string launch_bwd_config<BwdHd128>(const BwdProblem&, const BwdWorkspace&, cudaStream_t, const BwdSchedule&);
template std::string launch_bwd_config<BwdHd128Rows80>(const BwdProblem&, const BwdWorkspace&, cudaStream_t, const BwdSchedule&);
template std::string launch_bwd_config<BwdHd128Persistent>(const BwdProblem&, const BwdWorkspace&, cudaStream_t, const BwdSchedule&);
template std::string launch_bwd_config<BwdHd256>(const BwdProblem&, const BwdWorkspace&, cudaStream_t, const BwdSchedule&);
std::string launch_bwd(const BwdProblem&, const BwdWorkspace&, cudaStream_t) { return "stub"; }
}
#include <climits>
#include <map>
#include <set>
#include <deque>

using namespace fa4::hopper;
using VM = TileMask<MaskKind::kVariant>;

static void id_hull(const int32_t* r, int p0, int p1, int* mn, int* mx) {
  int a = INT_MAX, b = INT_MIN;
  for (int c = p0 / 64; c <= (p1 - 1) / 64; ++c) { a = std::min(a, r[2 * c]); b = std::max(b, r[2 * c + 1]); }
  *mn = a; *mx = b;
}
static void narrow_by_hull(const int32_t* r, int mn, int mx, int* lo, int* hi) {
  int first = INT_MAX, last = -1;
  for (int c = *lo / 64; c <= (*hi - 1) / 64; ++c)
    if (r[2 * c] <= mx && r[2 * c + 1] >= mn) { first = std::min(first, c); last = std::max(last, c); }
  if (last < 0) { *lo = *hi = 0; } else { *lo = std::max(*lo, first * 64); *hi = std::min(*hi, (last + 1) * 64); }
}
static void narrow_rows(const VM& m, int c0, int c1, int* lo, int* hi) {
  if (m.q_ids == nullptr || *lo >= *hi) return;
  int mn, mx;
  id_hull(m.kv_ranges, c0, std::min(c1, m.kv_len), &mn, &mx);
  narrow_by_hull(m.q_ranges, mn, mx, lo, hi);
}
static void query_blocks(const VM& m, bool narrow, int n0, int bn, int bm, int* b, int* e) {
  int lo, hi;
  m.row_span(n0, n0 + bn, &lo, &hi);
  if (narrow) narrow_rows(m, n0, n0 + bn, &lo, &hi);
  VM::blocks_of(lo, hi, bm, b, e);
}
// BwdVariantTile + needs_mask (variant.cuh), serial.
struct VT {
  int full_lo, full_hi, seg_id; bool seg;
  VT(const VM& mask, int c0, int c1) {
    full_lo = c1 <= mask.kv_len ? mask.row_lo(c1 - 1) : INT_MAX;
    full_hi = mask.row_hi(c0);
    seg = mask.q_ids != nullptr; seg_id = 0;
    if (seg && full_lo != INT_MAX) {
      seg_id = mask.kv_ranges[2 * (c0 / 64)];
      for (int c = c0 / 64; c <= (c1 - 1) / 64; ++c)
        if (mask.kv_ranges[2 * c] != seg_id || mask.kv_ranges[2 * c + 1] != seg_id) full_lo = INT_MAX;
    }
  }
  bool needs(int m0, int bm, int seq_q, const int32_t* qr) const {
    const int r1 = std::min(m0 + bm, seq_q);
    if (m0 < full_lo || r1 > full_hi) return true;
    if (seg) for (int c = m0 / 64; c <= (r1 - 1) / 64; ++c) if (qr[2 * c] != seg_id || qr[2 * c + 1] != seg_id) return true;
    return false;
  }
};

struct Geo { const char* name; int bm, bn; };
static long g_fail = 0, g_checked = 0;
#define CHECK(cond, ...) do { if (!(cond)) { if (g_fail < 20) { std::printf("FAIL: " __VA_ARGS__); std::printf("\n"); } ++g_fail; } } while (0)

// Deterministic dispatch: grid (n_blocks, heads_kv, batch), x fastest, blockIdx.x -> key block
// n_blocks - 1 - x; `sms` CTAs resident at once, dispatched in linear order as slots free. Each
// CTA does its steps (g outer, m inner) in order, each waiting for sem[b][h][m] == rank.
static bool det_dispatch(int n_blocks, int heads_kv, int batch, int group, int sms,
                         const std::vector<std::vector<std::pair<int,int>>>& rng_bn,  // [batch][n] -> (b,e)
                         const std::vector<std::vector<std::vector<int>>>& rank) {   // [batch][n][m-b]
  struct C { int lin, n, kvh, b, g, m; };
  const long total = long(n_blocks) * heads_kv * batch;
  std::map<std::tuple<int,int,int>, int> sem;
  std::vector<C> res;
  long next = 0, done = 0;
  while (done < total) {
    while ((long)res.size() < sms && next < total) {
      const int x = int(next % n_blocks), y = int((next / n_blocks) % heads_kv), z = int(next / (long(n_blocks) * heads_kv));
      const int n = n_blocks - 1 - x;
      res.push_back({int(next), n, y, z, 0, rng_bn[z][n].first});
      ++next;
    }
    bool progress = false;
    for (size_t i = 0; i < res.size();) {
      C& c = res[i];
      const auto [b, e] = rng_bn[c.b][c.n];
      bool finished = b >= e;
      while (!finished) {
        const int head = c.kvh * group + c.g;
        int& s = sem[{c.b, head, c.m}];
        if (s != rank[c.b][c.n][c.m - b]) break;
        ++s; progress = true;
        if (++c.m == e) { c.m = b; if (++c.g == group) finished = true; }
      }
      if (finished) { res.erase(res.begin() + i); ++done; progress = true; } else ++i;
    }
    if (!progress) {
      std::printf("DEADLOCK: %zu resident CTAs wait (sms %d); first: n %d kvh %d b %d m %d\n", res.size(), sms,
                  res[0].n, res[0].kvh, res[0].b, res[0].m);
      return false;
    }
  }
  // every semaphore ends at the number of key blocks visiting its query block
  return true;
}

static void check_problem(const char* what, int B, int sq, int sk, int hq, int hkv, bool causal, int left, int right,
                          const std::vector<int32_t>& qlen, const std::vector<int32_t>& kvlen,
                          const std::vector<int32_t>& qids, const std::vector<int32_t>& kvids,
                          const std::vector<int32_t>& qrng, const std::vector<int32_t>& kvrng, Geo geo, bool dispatch) {
  ProblemShape p{B, sq, sk, hq, hkv, 128, Dtype::kBf16, 0.1f, causal};
  p.variant.window_left = left; p.variant.window_right = right;
  p.variant.q_lengths = qlen.empty() ? nullptr : qlen.data();
  p.variant.kv_lengths = kvlen.empty() ? nullptr : kvlen.data();
  p.variant.q_segment_ids = qids.empty() ? nullptr : qids.data();
  p.variant.kv_segment_ids = kvids.empty() ? nullptr : kvids.data();
  p.variant.q_segment_ranges = qrng.empty() ? nullptr : qrng.data();
  p.variant.kv_segment_ranges = kvrng.empty() ? nullptr : kvrng.data();
  const MaskArgs a = make_mask_args(p);
  const int bm = geo.bm, bn = geo.bn;
  const int n_blocks = (sk + bn - 1) / bn, m_blocks = (sq + bm - 1) / bm;
  const int group = hq / hkv;
  const int rr = causal ? std::min(right, 0) : right;
  for (int det = 0; det < 2; ++det) {
    std::vector<std::vector<std::pair<int,int>>> rng_bn(B);
    std::vector<std::vector<std::vector<int>>> rank(B);
    for (int bb = 0; bb < B; ++bb) {
      const VM mask(a, bb);
      const int32_t* qr = mask.q_ranges;
      // visibility by the contract (variants-contract.md), for the superset / unmasked checks
      auto visible = [&](int i, int j) {
        if (i >= mask.q_len || j >= mask.kv_len) return false;
        if (left < kUnb && j < i + mask.off - left) return false;
        if (rr < kUnb && j > i + mask.off + rr) return false;
        if (!qids.empty() && qids[size_t(bb) * sq + i] != kvids[size_t(bb) * sk + j]) return false;
        return true;
      };
      rng_bn[bb].resize(n_blocks);
      for (int n = 0; n < n_blocks; ++n) {
        int b, e;
        query_blocks(mask, det == 0, n * bn, bn, bm, &b, &e);
        rng_bn[bb][n] = {b, e};
        ++g_checked;
        CHECK(0 <= b && b <= e && e <= m_blocks, "%s %s: range [%d,%d) of n %d out of [0,%d]", what, geo.name, b, e, n, m_blocks);
        if (b == e) CHECK(b == 0, "%s: empty range not (0,0)", what);
        const int c1 = std::min(n * bn + bn, sk);
        const VT vt(mask, n * bn, n * bn + bn);
        // every visible pair of this key block lies in a visited query block; every unmasked
        // step's tile is wholly visible
        if (long(sq) * sk <= (1L << 26)) {
          for (int m = 0; m < m_blocks; ++m) {
            const int r1 = std::min(m * bm + bm, sq);
            bool any = false, all = true;
            for (int i = m * bm; i < r1; ++i)
              for (int j = n * bn; j < c1; ++j) { const bool v = visible(i, j); any |= v; all &= v; }
            if (any) CHECK(m >= b && m < e, "%s %s det %d b %d: n %d m %d has visible pairs outside [%d,%d)", what, geo.name, det, bb, n, m, b, e);
            if (m >= b && m < e && !vt.needs(m * bm, bm, sq, qr))
              CHECK(all && c1 - n * bn == bn, "%s %s: n %d m %d unmasked but not all visible", what, geo.name, n, m);
          }
        }
      }
      if (det) {
        // ranks (bwd_dq_rank_variant): key blocks above n whose (band) range holds m
        rank[bb].resize(n_blocks);
        const VM mask(a, bb);
        for (int n = 0; n < n_blocks; ++n) {
          const auto [b, e] = rng_bn[bb][n];
          for (int m = b; m < e; ++m) {
            int cnt = 0;
            for (int np = n + 1; np < n_blocks; ++np) {
#ifdef MUTATE_RANK_NARROWED
              int b2, e2;
              query_blocks(mask, true, np * bn, bn, bm, &b2, &e2);
              cnt += (m >= b2 && m < e2);
#else
              cnt += (m >= rng_bn[bb][np].first && m < rng_bn[bb][np].second);
#endif
            }
            rank[bb][n].push_back(cnt);
          }
        }
        // ranks of each m: a permutation 0 .. |V(m)| - 1, descending in n
        for (int m = 0; m < m_blocks; ++m) {
          std::vector<int> rs;
          for (int n = n_blocks - 1; n >= 0; --n)
            if (m >= rng_bn[bb][n].first && m < rng_bn[bb][n].second) rs.push_back(rank[bb][n][m - rng_bn[bb][n].first]);
          for (size_t t = 0; t < rs.size(); ++t) CHECK(rs[t] == int(t), "%s: rank of m %d not a permutation", what, m);
        }
      }
    }
    if (det && dispatch)
      for (int sms : {1, 2, 7, 132}) CHECK(det_dispatch(n_blocks, hkv, B, group, sms, rng_bn, rank), "%s %s: det dispatch deadlock with %d SMs", what, geo.name, sms);
  }
}

static Geo geo_of(int d) { return d == 64 ? Geo{"hd64", 128, 128} : d == 128 ? Geo{"hd128", 64, 128} : Geo{"hd256", 64, 80}; }

// A causal band on the kCausal kernels (bwd_causal_band, heuristics.h), against the band as
// TileMask<kVariant> states it: per key block the query-block range (the causal diagonal's first
// block, bwd_band_query_end's last), every step the kernels call unmasked has every pair of its
// tile visible, on masked steps the two thresholds (bwd_causal_hide_below, bwd_band_hide_from)
// hide exactly the invisible pairs, and the deterministic ranks (bwd_dq_rank's causal formula)
// are 0 .. k-1 over the k key blocks visiting a query block, descending in n.
static void check_causal_band(int sq, int sk, int left, const Geo& g) {
  ProblemShape p{1, sq, sk, 1, 1, g.bm == 128 ? 64 : 128, Dtype::kBf16, 1.f, true};
  p.variant.window_left = left;
  p.variant.window_right = kUnb;
  if (!bwd_causal_band(p)) {
    std::printf("FAIL band sq=%d sk=%d left=%d: not a causal band\n", sq, sk, left);
    ++g_fail;
    return;
  }
  const int reach = bwd_band_reach(p);
  const MaskArgs a = make_mask_args(p);
  const VM band(a, 0);
  const int off = sk - sq;
  const int n_blocks = (sk + g.bn - 1) / g.bn;
  const int m_blocks = (sq + g.bm - 1) / g.bm;
  const bool bounded = reach < sq;
  std::vector<int> visitors(m_blocks, 0);
  std::vector<std::vector<int>> ranks(m_blocks);
  for (int n = 0; n < n_blocks; ++n) {
    const int n0 = n * g.bn;
    ++g_checked;
    int b = AttentionMask<true>{sq, sk}.query_block_begin(n0, g.bm), e = m_blocks;
    if (bounded) {
      e = bwd_band_query_end(sk, reach, n0, e, g.bm, g.bn);
      if (e < b) e = b;
    }
    int vb, ve;
    band.query_blocks(n0, n0 + g.bn, g.bm, &vb, &ve);
    const bool empty = e <= b, vempty = ve <= vb;
    if (empty != vempty || (!empty && (b != vb || e != ve))) {
      std::printf("FAIL band sq=%d sk=%d left=%d %s n=%d: range [%d, %d) against the band's [%d, %d)\n", sq, sk, left,
                  g.name, n, b, e, vb, ve);
      ++g_fail;
      continue;
    }
    for (int m = b; m < e; ++m) {
      const int m0 = m * g.bm;
      const bool need = n0 + g.bn > sk || n0 + g.bn - 1 > m0 + off ||
                        (bounded && std::min(m0 + g.bm, sq) - 1 - n0 > reach);
      for (int i = m0; i < std::min(m0 + g.bm, sq); ++i) {
        for (int j = n0; j < n0 + g.bn; ++j) {
          const bool visible = j < sk && band.in_band(i, j);
          // The kernels' element test, relative to column 0 of the row block (query0 = m0).
          const int c = i - m0;
          const int below = j >= sk ? INT_MAX : j - off - m0;
          const int from = bounded ? j - m0 + reach + 1 : INT_MAX;
          const bool kept = !need || !(c < below || c >= from);
          if (kept != visible) {
            std::printf("FAIL band sq=%d sk=%d left=%d %s n=%d m=%d: (%d, %d) %s but %s (need_mask %d)\n", sq, sk,
                        left, g.name, n, m, i, j, kept ? "kept" : "hidden", visible ? "visible" : "invisible", need);
            ++g_fail;
            return;
          }
        }
      }
      const int x = (m + 1) * g.bm + sk - sq;
      ranks[m].push_back(std::min(n_blocks - 1, (x - 1) / g.bn) - n);
      ++visitors[m];
    }
  }
  for (int m = 0; m < m_blocks; ++m) {
    // Visited in increasing n: the ranks must read k-1, k-2, .., 0.
    for (int t = 0; t < int(ranks[m].size()); ++t) {
      if (ranks[m][t] != visitors[m] - 1 - t) {
        std::printf("FAIL band sq=%d sk=%d left=%d %s m=%d: rank %d of visitor %d (of %d)\n", sq, sk, left, g.name, m,
                    ranks[m][t], t, visitors[m]);
        ++g_fail;
        return;
      }
    }
  }
}

int main(int argc, char** argv) {
  // Causal bands: ragged and aligned lengths, seq_q above and below seq_k, windows from the
  // diagonal alone to wider than the sequence.
  for (int d : {128})
    for (int sq : {1, 63, 64, 200, 300, 513, 1024})
      for (int sk : {1, 100, 128, 300, 511, 1024})
        for (int left : {0, 1, 2, 62, 63, 64, 65, 100, 126, 127, 128, 129, 190, 200, 255, 256, 1000, 5000}) check_causal_band(sq, sk, left, geo_of(d));
  const std::vector<Case> vcases = variant_cases();
  // Replays the harness's seeds: --variants-only starts at 1, the default run after the 132 dense cases.
  for (uint64_t seed0 : {uint64_t(1), uint64_t(133)}) {
    uint64_t seed = seed0;
    for (int d : {64, 128, 256})
      for (size_t n = 0; n < vcases.size(); ++n)
        for (int bf16 = 1; bf16 >= (n % 2 ? 1 : 0); --bf16) {
          Case c = vcases[n];
          c.d = d; c.bf16 = bf16; c.with_dlse = (seed % 2) == 0;
          // run_case's draws before make_variant_inputs
          std::mt19937_64 rng(seed++);
          std::normal_distribution<float> nd(0.f, 1.f);
          const size_t nq = size_t(c.b) * c.sq * c.hq * c.d, nk = size_t(c.b) * c.sk * c.hkv * c.d;
          for (size_t i = 0; i < 2 * nq + 2 * nk; ++i) (void)to_bits(nd(rng), c.bf16);
          if (c.with_dlse) for (size_t i = 0; i < size_t(c.b) * c.hq * c.sq; ++i) (void)nd(rng);
          const VariantInputs vin = make_variant_inputs(c, rng);
          const std::string what = describe(c);
          check_problem(what.c_str(), c.b, c.sq, c.sk, c.hq, c.hkv, c.causal, c.v.left, c.v.right, vin.q_len, vin.kv_len,
                        vin.q_ids, vin.kv_ids, vin.q_rng, vin.kv_rng, geo_of(d), true);
        }
  }
  // The benchmark that hung: causal, window (4096, 0), 16k x 16k, 16 heads, hd128; and hd64 / hd256.
  const std::vector<int32_t> none;
  for (int d : {64, 128, 256})
    check_problem("bench causal win(4096,0) 16k", 1, 16384, 16384, 16, 16, true, 4096, 0, none, none, none, none, none,
                  none, geo_of(d), true);
  std::printf("%ld key-block ranges checked, %ld failures\n", g_checked, g_fail);
  return g_fail ? 1 : 0;
}
