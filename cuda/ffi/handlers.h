// Every XLA FFI handler symbol of the extension; registrations.cc exports them to Python.
#pragma once

#include "xla/ffi/api/ffi.h"

// CPU: blocked online-softmax attention (cuda/cpu/attention_cpu.h).
XLA_FFI_DECLARE_HANDLER_SYMBOL(Fa4FwdCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(Fa4BwdCpu);

#ifdef JAX_FA4_WITH_CUDA
// CUDA: Hopper (sm_90a) kernels (cuda/hopper/).
XLA_FFI_DECLARE_HANDLER_SYMBOL(Fa4FwdCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(Fa4BwdCuda);
#endif
