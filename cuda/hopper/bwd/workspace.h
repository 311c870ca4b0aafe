// The Hopper backward's device workspace: its size and its split into sub-buffers. Host-only plain
// C++ (no CUDA headers), so the nanobind module (registrations.cc, built by the host compiler) can
// export the size to the Python lowering, which allocates the workspace as an extra result of the
// custom call. One formula, used by the lowering, the FFI handler and the standalone check.
#pragma once

#include <cstddef>
#include <cstdint>

namespace fa4::hopper {

// Scratch the backward needs on the device, rows padded to bwd_seq_q_pad(seq_q, head_dim):
// dq_accum float32 [batch, heads_q, pad, head_dim]; dq_sem int32 [batch, heads_q, pad / 64] (the
// deterministic mode's semaphore per query block: pad / 64 is enough for every configuration's
// block_m, 64, 80 or 128), then tile_counter int32 [1] (the persistent kernel's next tile); lse2 and delta
// float32 [batch, heads_q, pad]. The preprocess zeroes dq_accum, dq_sem and tile_counter
// (bwd/prepost.cuh).
struct BwdWorkspace {
  float* dq_accum;
  int* dq_sem;
  int* tile_counter;
  float* lse2;
  float* delta;
};

// Query rows rounded up to a whole number of every configuration's block_m of the head dim (64 and
// 128; at hd128 also 80) and of 128 (the preprocess's row blocks, 128-byte vectors).
inline int64_t bwd_seq_q_pad(int64_t seq_q, int64_t head_dim) {
  const int64_t rows = head_dim == 128 ? (seq_q + 79) / 80 * 80 : seq_q;
  return (rows + 127) / 128 * 128;
}

// Each sub-buffer starts on this boundary (the kernels need 16 bytes: TMA, 1-D bulk copies and
// vector loads; 256 keeps every row block on whole cache sectors).
constexpr size_t kBwdWorkspaceAlign = 256;

// Smallest query block of any configuration: dq_sem has one int per kBwdSemRows padded rows.
constexpr int64_t kBwdSemRows = 64;
// int32 counters after the semaphores (the persistent kernel's tile counter).
constexpr int64_t kBwdCounterInts = 1;

// Byte offsets of the sub-buffers from the aligned base and the allocation size: THE formula
// (bwd_workspace_bytes and bwd_workspace_from both read it). Every sub-buffer is rounded up to
// kBwdWorkspaceAlign, and kBwdWorkspaceAlign of slack moves an unaligned base up (XLA guarantees
// only 16-64 bytes for a custom call's buffers).
struct BwdWorkspaceLayout {
  size_t dq_accum, dq_sem, lse2, delta, bytes;
};
inline BwdWorkspaceLayout bwd_workspace_layout(int64_t batch, int64_t seq_q, int64_t heads_q, int64_t head_dim) {
  const size_t rows = size_t(batch) * size_t(heads_q) * size_t(bwd_seq_q_pad(seq_q, head_dim));
  auto up = [](size_t x) { return (x + kBwdWorkspaceAlign - 1) / kBwdWorkspaceAlign * kBwdWorkspaceAlign; };
  BwdWorkspaceLayout l;
  l.dq_accum = 0;
  l.dq_sem = l.dq_accum + up(rows * size_t(head_dim) * 4);
  l.lse2 = l.dq_sem + up((rows / size_t(kBwdSemRows) + size_t(kBwdCounterInts)) * 4);
  l.delta = l.lse2 + up(rows * 4);
  l.bytes = l.delta + up(rows * 4) + kBwdWorkspaceAlign;
  return l;
}

// Bytes of one allocation holding the whole workspace, at ANY base alignment.
inline size_t bwd_workspace_bytes(int64_t batch, int64_t seq_q, int64_t heads_q, int64_t head_dim) {
  return bwd_workspace_layout(batch, seq_q, heads_q, head_dim).bytes;
}

// Splits one allocation of at least bwd_workspace_bytes(...) bytes, at any alignment, into the
// workspace; every sub-buffer is kBwdWorkspaceAlign-aligned and lies inside the allocation.
inline BwdWorkspace bwd_workspace_from(void* base, int64_t batch, int64_t seq_q, int64_t heads_q,
                                       int64_t head_dim) {
  const BwdWorkspaceLayout l = bwd_workspace_layout(batch, seq_q, heads_q, head_dim);
  const uintptr_t a = reinterpret_cast<uintptr_t>(base);
  char* b = static_cast<char*>(base) + ((a + kBwdWorkspaceAlign - 1) / kBwdWorkspaceAlign * kBwdWorkspaceAlign - a);
  BwdWorkspace ws;
  ws.dq_accum = reinterpret_cast<float*>(b + l.dq_accum);
  ws.dq_sem = reinterpret_cast<int*>(b + l.dq_sem);
  ws.tile_counter = ws.dq_sem + size_t(batch) * size_t(heads_q) * size_t(bwd_seq_q_pad(seq_q, head_dim)) / size_t(kBwdSemRows);
  ws.lse2 = reinterpret_cast<float*>(b + l.lse2);
  ws.delta = reinterpret_cast<float*>(b + l.delta);
  return ws;
}

}  // namespace fa4::hopper
