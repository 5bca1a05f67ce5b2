// The passes between tile IR and LLVM lowering. Each takes a verified kernel and
// leaves a verified kernel. The order they run in is the pipeline
// (compiler/passes/Pipeline.cpp), one readable list.
#pragma once

#include "ir/IR.h"

namespace attnjit::compiler {

struct PassOptions {
  int numWarps = 4;       // from the kernel's num_warps attribute
  bool hasMmaSync = true; // target supports mma.sync m16n8k16 (sm_80+)
  bool hasWgmma = false;  // target has wgmma (sm_90a): layouts may take its column blocks
  // load_tensor ops TMA can copy stay for code generation (expand-tensor-loads);
  // false expands every one (the compile driver's fallback when code
  // generation cannot use TMA after all).
  bool allowTensorMemoryAccelerator = true;
};

// Rewrites every load_tensor into the masked load of pointers its definition
// states (ir/Ops.def), before any pass that plans loads.
support::Status expandTensorLoads(ir::Kernel& kernel, const PassOptions& options);
// Removes ops whose results are unused and that have no side effects.
support::Status eliminateDeadCode(ir::Kernel& kernel, const PassOptions& options);
// Merges identical side-effect-free ops with identical operands (common
// subexpressions) within a block and its nested regions.
support::Status eliminateCommonSubexpressions(ir::Kernel& kernel, const PassOptions& options);
// Two-stage software pipelining of masked tile loads in `for` loops (the next
// iteration's loads are issued before this iteration's compute and carried), when
// the kernel's num_stages attribute is 2; errors name unsupported stage counts.
support::Status pipelineLoads(ir::Kernel& kernel, const PassOptions& options);
// Gives every tile value a layout (docs/architecture.md, "Layout assignment")
// and inserts convert_layout where a producer's layout differs from what a
// consumer needs; index computations are recomputed in the layout each consumer
// needs instead of being converted.
support::Status assignLayouts(ir::Kernel& kernel, const PassOptions& options);

}  // namespace attnjit::compiler
