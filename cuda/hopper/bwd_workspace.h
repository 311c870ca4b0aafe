// The Hopper backward's device workspace: its size and its split into sub-buffers. Host-only plain
// C++ (no CUDA headers), so the nanobind module (registrations.cc, built by the host compiler) can
// export the size to the Python lowering, which allocates the workspace as an extra result of the
// custom call. One formula, used by the lowering, the FFI handler and the standalone check.
#pragma once

#include <cstddef>
#include <cstdint>

namespace fa4::hopper {

// Scratch the backward needs on the device, all float32, rows padded to bwd_seq_q_pad(seq_q):
// dq_accum [batch, heads_q, pad, head_dim], lse2 and delta [batch, heads_q, pad].
struct BwdWorkspace {
  float* dq_accum;
  float* lse2;
  float* delta;
};

// Query rows rounded up to a whole number of every config's block_m (and 128-byte vectors).
inline int64_t bwd_seq_q_pad(int64_t seq_q) { return (seq_q + 127) / 128 * 128; }

// Each sub-buffer starts on this boundary (the kernels need 16 bytes: TMA, 1-D bulk copies and
// vector loads; 256 keeps every row block on whole cache sectors).
constexpr size_t kBwdWorkspaceAlign = 256;

// Bytes of one allocation holding the whole workspace, at ANY base alignment: the three
// sub-buffers, each rounded up to kBwdWorkspaceAlign, plus kBwdWorkspaceAlign of slack for moving
// an unaligned base up (XLA guarantees only 16-64 bytes for a custom call's buffers).
inline size_t bwd_workspace_bytes(int64_t batch, int64_t seq_q, int64_t heads_q, int64_t head_dim) {
  const size_t rows = size_t(batch) * size_t(heads_q) * size_t(bwd_seq_q_pad(seq_q));
  return rows * size_t(head_dim) * 4 + 2 * rows * 4 + 3 * kBwdWorkspaceAlign;
}

// Splits one allocation of at least bwd_workspace_bytes(...) bytes, at any alignment, into the
// workspace; every sub-buffer is kBwdWorkspaceAlign-aligned and lies inside the allocation.
inline BwdWorkspace bwd_workspace_from(void* base, int64_t batch, int64_t seq_q, int64_t heads_q,
                                       int64_t head_dim) {
  const size_t rows = size_t(batch) * size_t(heads_q) * size_t(bwd_seq_q_pad(seq_q));
  auto up = [](size_t x) { return (x + kBwdWorkspaceAlign - 1) / kBwdWorkspaceAlign * kBwdWorkspaceAlign; };
  char* b = static_cast<char*>(base) + (up(reinterpret_cast<uintptr_t>(base)) - reinterpret_cast<uintptr_t>(base));
  BwdWorkspace ws;
  ws.dq_accum = reinterpret_cast<float*>(b);
  ws.lse2 = reinterpret_cast<float*>(b + up(rows * size_t(head_dim) * 4));
  ws.delta = reinterpret_cast<float*>(b + up(rows * size_t(head_dim) * 4) + up(rows * 4));
  return ws;
}

}  // namespace fa4::hopper
