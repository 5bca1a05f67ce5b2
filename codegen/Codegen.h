// Tile IR (after layout assignment) → LLVM IR → PTX. The public face of codegen/:
// nothing LLVM-typed crosses it.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

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
  // ldmatrix, cp.async and vector accesses, and the kernels run within a few
  // percent of O3's (measured: docs/perf-log.md, 2026-11-30).
  Fast,
};

// One step of codegen, in the order they run: the second half of the compile
// pipeline, after the tile-IR passes (compiler/passes/Pipeline.cpp). Every one
// of them can be printed after (--print-after=NAME) and is timed
// (--time-passes).
struct CodegenStage {
  const char* name;
  const char* description;
};
std::span<const CodegenStage> codegenStages();

struct StageTiming {
  std::string stage;
  double milliseconds = 0;
};

struct CodegenOptions {
  TargetInfo target;
  int ptxVersion = 0;  // from choosePtxVersion
  bool optimize = true;
  LlvmPipeline llvmPipeline = LlvmPipeline::Fast;
  // Print the LLVM IR before and after the pipeline into CodegenResult (for
  // inspection: --emit=llvm, dump folders); 3-8 ms per attention kernel.
  bool printLlvmIr = true;
  // Inspection: after each stage named by printAfter (or every stage), `dump`
  // receives "// -----// IR after <stage> //----- //" and the stage's result:
  // the plan for the planning stages, the LLVM IR for the others.
  bool printAfterAll = false;
  std::string printAfter;
  std::function<void(const std::string&)> dump;
};

// Where a kernel's dynamic shared memory goes, in bytes: the cp.async slots
// (the producer warps' mbarriers in front of them, when there are producers),
// the loop-invariant operands kept in shared memory, the shared conversions'
// buffers (each region with the alignment padding in front of it), and the
// conversion scratch area after them. An epilogue that reuses the buffers'
// bytes once the last loop is done may need more than `scratch`: the total is
// CodegenResult::sharedMemoryBytes.
struct SharedMemoryUse {
  int slots = 0;
  int operands = 0;
  int conversions = 0;
  int scratch = 0;
};

// How a kernel's warps divide the work, as codegen planned it: the warps that
// compute, the producer warps that only issue the K/V copies (kernel attribute
// warp_specialize), the registers each role asks for with setmaxnreg (0: none
// asked, the launch's count), the cp.async buffers and the slots of each (how
// many tiles are in flight), and whether the two compute warpgroups take turns
// issuing their warpgroup MMAs (ping-pong).
struct WarpSchedule {
  int computeWarps = 0;
  int producerWarps = 0;
  int computeRegisters = 0;
  int producerRegisters = 0;
  int asyncBuffers = 0;
  int slotsPerBuffer = 0;
  bool pingPong = false;
};

struct CodegenResult {
  std::string kernelName;
  std::string llvmIr;           // as lowered (empty unless printLlvmIr)
  std::string llvmIrOptimized;  // after the LLVM pipeline (empty unless printLlvmIr)
  std::string ptx;
  int numThreads = 0;           // block size (num_warps × 32)
  int sharedMemoryBytes = 0;    // dynamic shared memory the kernel needs
  SharedMemoryUse sharedMemoryUse;
  WarpSchedule warpSchedule;
  // The tensor maps the kernel takes after its parameters (its TMA copies of
  // load_tensor tiles), in runtime/TensorMap.h's recipe text: "first=N" and a
  // line per map; empty when it takes none.
  std::string tensorMaps;
  double lowerMs = 0, optimizeMs = 0, emitMs = 0;
  // Every stage that ran, in order (the planning and lowering stages once per
  // attempt when fit-shared-memory lowers again).
  std::vector<StageTiming> stageTimings;
};

// Every tile value must carry a layout (compiler::assignLayouts). Unsupported
// combinations (an op/type pair the backend cannot lower yet, e.g. fp8 on sm_80)
// return a diagnostic naming the op, its types and the target.
support::Expected<CodegenResult> generatePtx(const ir::Kernel& kernel, const CodegenOptions& options);

// The fp8 encodings (F8E4M3 or F8E5M2) of `values` as the kernels of targets
// without the fp8 cvt (before sm_89) compute them: the instructions codegen
// emits there, evaluated by LLVM's constant folder (IEEE f32 arithmetic, as the
// GPU's). The tests hold them against ir::encodeFloat, PTX cvt.rn.satfinite's
// semantics.
std::vector<uint8_t> softwareFp8Encodings(std::span<const float> values, ir::ScalarKind kind);

// The slot protocol of warp-specialized kernels (codegen/lower/
// WarpSpecialization.cpp) for buffers of `slots` slots as codegen emits it,
// evaluated by LLVM's constant folder for fill numbers and iterations
// 0 .. count − 1, with the slot chain the compute warps carry: the fill iteration i
// makes (the prologue's is 0), the slot a fill goes to, the parity the
// producer waits for on that slot's empty barrier before it, and the parity
// the compute warps wait for on the full barrier in an iteration. The tests
// run the mbarrier protocol on them.
struct SlotProtocolTable {
  std::vector<int> fillOfIteration, slotOfFill, emptyWaitParity, fullWaitParity;
  std::vector<int> slotOfIteration;  // the compute warps' carried slot: 0, then nextSlot of the previous
};
SlotProtocolTable warpSpecializationSlotProtocol(int count, int slots);

// The version of the LLVM linked in ("22.1.8"): part of every cache key.
std::string llvmVersion();

// The revision of the lowering, part of every JIT cache key
// (compiler/driver/Jit.cpp) so that the cache never serves PTX an attnjit with
// a different lowering generated. Bump it with any change to the PTX generated
// for the same tile IR (lowering, instruction selection, LLVM pipeline or
// backend settings); changes that leave that PTX byte-identical need no bump.
inline constexpr int kCodegenRevision = 21;

}  // namespace attnjit::codegen
