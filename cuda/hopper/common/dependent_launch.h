// Host side of programmatic dependent launch (ptx/grid_dependency.cuh is the device side).
#pragma once
#include <cuda_runtime.h>

#include <utility>

namespace fa4::hopper {

// Launches `kernel` as a programmatic dependent of the stream's previous kernel: its blocks may
// start (and run their set-up up to grid_dependency_wait) once every block of that kernel has
// started or executed grid_dependency_launch_dependents, which takes the launch gap off a chain
// of kernels on one stream. The kernel must call grid_dependency_wait before touching any global
// memory the previous kernel writes or reads.
template <class... Params, class... Args>
cudaError_t launch_dependent(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                             Args&&... args) {
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = attr;
  config.numAttrs = 1;
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

}  // namespace fa4::hopper
