// Tile IR (after layout assignment) → LLVM IR → PTX. The public face of codegen/:
// nothing LLVM-typed crosses it.
#pragma once

#include <string>

#include "codegen/Target.h"
#include "ir/IR.h"

namespace attnjit::codegen {

// The LLVM work between lowering and PTX text (when CodegenOptions::optimize).
enum class LlvmPipeline {
  // LLVM's generic O3 pipeline, then the NVPTX backend's full codegen pipeline.
  O3,
  // The default, for the JIT's compile time (spec -> PTX of the op API's kernels
  // in about half the time of O3): a short list of scalar cleanups sized for our
  // IR (straight-line, fully unrolled tiles, no calls, no allocas: EarlyCSE,
  // InstCombine, SimplifyCFG, value ranges, LICM and induction variables in
  // rotated loops, GVN, InstCombine, InferAlignment, DCE), and no straight-line
  // strength reduction or n-ary reassociation in the backend (SLSR is quadratic
  // in our large blocks through ScalarEvolution). The PTX has the same mma,
  // ldmatrix, cp.async and vector accesses; on the H200 (2026-11-30) the kernels
  // ran within 1.6% of O3's (prefill 1.6% slower, decode and MLA 0.4-0.7%
  // faster).
  Fast,
};

struct CodegenOptions {
  TargetInfo target;
  int ptxVersion = 0;  // from choosePtxVersion
  bool optimize = true;
  LlvmPipeline llvmPipeline = LlvmPipeline::Fast;
  // Print the LLVM IR before and after the pipeline into CodegenResult (for
  // inspection: --emit=llvm, dump folders); 3-8 ms per attention kernel.
  bool printLlvmIr = true;
};

struct CodegenResult {
  std::string kernelName;
  std::string llvmIr;           // as lowered (empty unless printLlvmIr)
  std::string llvmIrOptimized;  // after the LLVM pipeline (empty unless printLlvmIr)
  std::string ptx;
  int numThreads = 0;           // block size (num_warps × 32)
  int sharedMemoryBytes = 0;    // dynamic shared memory the kernel needs
  double lowerMs = 0, optimizeMs = 0, emitMs = 0;
};

// Every tile value must carry a layout (compiler::assignLayouts). Unsupported
// combinations (an op/type pair the backend cannot lower yet, e.g. fp8 on sm_80)
// return a diagnostic naming the op, its types and the target.
support::Expected<CodegenResult> generatePtx(const ir::Kernel& kernel, const CodegenOptions& options);

// The version of the LLVM linked in ("22.1.8"): part of every cache key.
std::string llvmVersion();

// The revision of the lowering: bumped whenever the PTX generated for the same
// tile IR changes, so JIT cache keys (compiler/driver/Jit.cpp) never match entries a
// previous attnjit compiled differently. 2: cp.async for pipelined tiles. 3: slot
// reads next to their uses, swizzled offsets as register ^ phase + immediate,
// 32-bit shared-memory pointers, the backend at its default level. 4: repeated
// barriers and waits removed. 5: float-to-integer casts through cvt.rzi (PTX
// saturates and maps NaN to 0 itself). 6: reshapes that keep every element in
// its thread renumber registers instead of going through shared memory. 7: fp8
// and int8 casts to f16/bf16 convert two registers at a time. 8: loads whose
// pointers are provably equal are issued once; constexprs are axis constants.
// 9: mma in k-outer, m-inner order; shared_invariant_operands. 10: exp2 and exp
// through ex2.approx.ftz. 11: div {approx = 1} through div.full.f32.
inline constexpr int kCodegenRevision = 11;

}  // namespace attnjit::codegen
