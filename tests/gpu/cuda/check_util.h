// Helpers shared by the standalone kernel checks: abort on a CUDA error, and the 16-bit storage
// conversions (the device's own intrinsics, so host rounding matches what the kernels read).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "hopper/common/problem.h"

// Exit code 2 on a CUDA error: the run scripts read it as "the kernel faulted", not "wrong numbers".
#define CHECK_CUDA(x)                                                                      \
  do {                                                                                     \
    cudaError_t e_ = (x);                                                                  \
    if (e_ != cudaSuccess) {                                                               \
      std::printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); \
      std::exit(2);                                                                        \
    }                                                                                      \
  } while (0)

static inline uint16_t to_bits(float x, bool bf16) {
  uint16_t b;
  if (bf16) {
    __nv_bfloat16 h = __float2bfloat16(x);
    std::memcpy(&b, &h, 2);
  } else {
    __half h = __float2half(x);
    std::memcpy(&b, &h, 2);
  }
  return b;
}

static inline float from_bits(uint16_t b, bool bf16) {
  if (bf16) {
    __nv_bfloat16 h;
    std::memcpy(&h, &b, 2);
    return __bfloat162float(h);
  }
  __half h;
  std::memcpy(&h, &b, 2);
  return __half2float(h);
}

// Timing warm-up: launches `launch` (returns "" or an error message) back to back, synchronising
// after each, for `ms` milliseconds, untimed. The harnesses generate ~1 s of random inputs on the
// host between timed cells; the GPU idles meanwhile and the first row timed after that read up to
// 10% high, which a palindromic order does not cancel. Exit code 3 on a launch error.
template <class Launch>
static inline void warm_up(Launch&& launch, int ms = 300) {
  const auto t0 = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(ms)) {
    const std::string err = launch();
    if (!err.empty()) {
      std::printf("launch error %s\n", err.c_str());
      std::exit(3);
    }
    CHECK_CUDA(cudaDeviceSynchronize());
  }
}

// The (min, max) id of every kSegmentChunk-row chunk of segment ids [batch, seq]: the range arrays
// the kernels skip blocks between documents with (common/problem.h; the CUDA lowering computes
// them the same way), [batch, ceil(seq / kSegmentChunk), 2].
static inline std::vector<int32_t> segment_chunk_ranges(const std::vector<int32_t>& ids, int batch, int seq) {
  constexpr int kChunk = fa4::hopper::kSegmentChunk;
  const int chunks = (seq + kChunk - 1) / kChunk;
  std::vector<int32_t> r(size_t(batch) * chunks * 2);
  for (int b = 0; b < batch; ++b)
    for (int c = 0; c < chunks; ++c) {
      int mn = INT32_MAX, mx = INT32_MIN;
      for (int i = c * kChunk; i < std::min(seq, (c + 1) * kChunk); ++i) {
        mn = std::min(mn, ids[size_t(b) * seq + i]);
        mx = std::max(mx, ids[size_t(b) * seq + i]);
      }
      r[(size_t(b) * chunks + c) * 2] = mn;
      r[(size_t(b) * chunks + c) * 2 + 1] = mx;
    }
  return r;
}

// Segment ids of one row of `seq` positions holding two interleaved documents: each 64-row chunk
// takes id 1 or 2 at random, and a quarter of the chunks switch to the other id part-way, so
// neither document is one range of rows (the kernels find no uniform run and skip no block).
static inline std::vector<int32_t> interleaved_document_ids(int seq, std::mt19937_64& rng) {
  std::vector<int32_t> ids;
  ids.reserve(size_t(std::max(seq, 0)));
  for (int c0 = 0; c0 < seq; c0 += 64) {
    const int id = 1 + int(rng() % 2);
    const int split = rng() % 4 == 0 ? c0 + 1 + int(rng() % 63) : c0 + 64;
    for (int i = c0; i < std::min(seq, c0 + 64); ++i) ids.push_back(i < split ? id : 3 - id);
  }
  return ids;
}

// Segment ids [batch, seq] of rows packed with `docs` documents of seq / docs positions each (the
// last one takes the remainder): document d holds id d, so the ids are non-decreasing.
static inline std::vector<int32_t> packed_document_ids(int batch, int seq, int docs) {
  std::vector<int32_t> ids(size_t(batch) * seq);
  const int len = std::max(1, seq / std::max(1, docs));
  for (int b = 0; b < batch; ++b)
    for (int i = 0; i < seq; ++i) ids[size_t(b) * seq + i] = std::min(i / len, docs - 1);
  return ids;
}

// Gives `v` segment ids of `docs` packed documents per row (packed_document_ids, q and kv alike)
// and their chunk ranges, in device memory; returns the buffers for cudaFree (none when docs <= 0).
static inline std::vector<void*> set_packed_documents(fa4::hopper::AttentionVariant* v, int batch, int seq,
                                                      int docs) {
  std::vector<void*> mem;
  if (docs <= 0) return mem;
  const std::vector<int32_t> ids = packed_document_ids(batch, seq, docs);
  const std::vector<int32_t> ranges = segment_chunk_ranges(ids, batch, seq);
  for (const std::vector<int32_t>* h : {&ids, &ranges}) {
    void* ptr;
    CHECK_CUDA(cudaMalloc(&ptr, h->size() * 4));
    CHECK_CUDA(cudaMemcpy(ptr, h->data(), h->size() * 4, cudaMemcpyHostToDevice));
    mem.push_back(ptr);
  }
  v->q_segment_ids = v->kv_segment_ids = static_cast<const int32_t*>(mem[0]);
  v->q_segment_ranges = v->kv_segment_ranges = static_cast<const int32_t*>(mem[1]);
  return mem;
}
