// Programmatic dependent launch (PTX `griddepcontrol`, sm_90): a kernel launched with
// cudaLaunchAttributeProgrammaticStreamSerialization may start while the kernel before it in the
// stream still runs; these two instructions order it against that kernel. In a kernel launched
// without the attribute both are no-ops.
#pragma once

namespace fa4::hopper {

// Blocks until every grid this one depends on has completed and its memory operations are
// visible: no global memory that an earlier kernel may write is read or written before it.
__device__ __forceinline__ void grid_dependency_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

// Lets the next kernel of the stream (if launched with the attribute) start its blocks now; it
// still sees this grid's writes only after its own grid_dependency_wait.
__device__ __forceinline__ void grid_dependency_launch_dependents() {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

}  // namespace fa4::hopper
