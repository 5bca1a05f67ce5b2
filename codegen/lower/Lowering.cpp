// The lowering driver: builds the kernel function, walks the tile IR, and lowers
// structured control flow (for, if) to LLVM blocks with phis per register.
#include <llvm/IR/IntrinsicsNVPTX.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Target/TargetMachine.h>

#include <chrono>

#include "codegen/Codegen.h"
#include "codegen/llvm/PtxEmitter.h"
#include "codegen/lower/AsyncCopy.h"
#include "codegen/lower/TensorCopies.h"
#include "codegen/lower/InlinePtx.h"
#include "codegen/lower/RedundantSync.h"
#include "codegen/lower/SharedConversions.h"
#include "codegen/lower/SharedOperands.h"
#include "codegen/lower/LoopCrossingPredicates.h"
#include "codegen/lower/SinkSlotReads.h"
#include "codegen/lower/LoweringContext.h"
#include "codegen/lower/WarpSpecialization.h"
#include "codegen/lower/WarpgroupMma.h"
#include "ir/KernelAttributes.h"
#include "ir/Numeric.h"

namespace attnjit::codegen {

using namespace ir;

LoweringContext::LoweringContext(llvm::LLVMContext& context, llvm::Module& m, const Kernel& k, const TargetInfo& t)
    : llvm(context),
      module(m),
      b(context),
      kernel(k),
      target(t),
      numWarps(static_cast<int>(ir::kernelAttribute(k, ir::KernelAttribute::NumWarps))) {}

LoweringContext::~LoweringContext() = default;

void LoweringContext::unsupported(const Operation& op, const std::string& what) {
  if (status.isOk())
    status = support::Status::error(op.location(), std::string("unsupported: '") + op.name() + "' " + what + " on " +
                                              target.name);
}

const Lowered& LoweringContext::get(const Value* v) const {
  auto it = values_.find(v);
  ATTNJIT_CHECK(it != values_.end(), "codegen: value used before it was lowered");
  return it->second;
}

LinearLayout LoweringContext::linearLayout(const Type& t, const Operation& where) {
  ATTNJIT_CHECK(t.isTile(), "linearLayout of a non-tile");
  if (!t.layout()) {
    unsupported(where, "on a tile without a layout (" + t.str() + "); run layout assignment first");
    LinearLayout dummy;
    dummy.shape = t.shape();
    dummy.lane.assign(LinearLayout::kLaneBits, Coord{0, 0, 0});
    return dummy;
  }
  auto ll = toLinearLayout(*t.layout(), t.shape(), numWarps);
  if (!ll) {
    unsupported(where, "with type " + t.str() + ": " + ll.diagnostic().message);
    LinearLayout dummy;
    dummy.shape = t.shape();
    dummy.lane.assign(LinearLayout::kLaneBits, Coord{0, 0, 0});
    return dummy;
  }
  return *ll;
}

llvm::Type* LoweringContext::elementType(const Type& t) {
  if (t.hasPointerElements())
    return llvm::PointerType::get(llvm, t.addressSpace() == AddressSpace::Global ? 1 : 3);
  switch (t.scalarKind()) {
    case ScalarKind::I1: return b.getInt1Ty();
    case ScalarKind::I4:
    case ScalarKind::I8:
    case ScalarKind::F8E4M3:
    case ScalarKind::F8E5M2: return b.getInt8Ty();
    case ScalarKind::I16: return b.getInt16Ty();
    case ScalarKind::I32: return b.getInt32Ty();
    case ScalarKind::I64: return b.getInt64Ty();
    case ScalarKind::F16: return b.getHalfTy();
    case ScalarKind::BF16: return b.getBFloatTy();
    case ScalarKind::F32: return b.getFloatTy();
    case ScalarKind::F64: return b.getDoubleTy();
  }
  return b.getInt32Ty();
}

llvm::Type* LoweringContext::memoryType(ScalarKind k) {
  if (k == ScalarKind::I1) return b.getInt8Ty();
  return elementType(Type::scalar(k));
}

llvm::Value* LoweringContext::coordinate(const LinearLayout& layout, int64_t reg, int dim) {
  int64_t regPart = layout.registerCoord(static_cast<uint64_t>(reg))[dim];
  std::string key = layout.str() + "/" + std::to_string(dim);
  llvm::Value*& threadPart = laneWarpCoord_[key];
  if (!threadPart) {
    // Bases occupy disjoint bits, so XOR = OR = sum of the selected bases.
    llvm::IRBuilder<>& e = *entryBuilder;
    llvm::Value* sum = e.getInt32(0);
    auto addBits = [&](const std::vector<Coord>& bases, llvm::Value* index) {
      for (size_t i = 0; i < bases.size(); ++i) {
        if (bases[i][dim] == 0) continue;
        llvm::Value* bit = e.CreateAnd(e.CreateLShr(index, static_cast<uint64_t>(i)), 1);
        sum = e.CreateOr(sum, e.CreateMul(bit, e.getInt32(static_cast<uint32_t>(bases[i][dim]))));
      }
    };
    addBits(layout.lane, laneId);
    addBits(layout.warp, warpId);
    threadPart = sum;
  }
  if (regPart == 0) return threadPart;
  return b.CreateOr(threadPart, i32(regPart));
}

llvm::Value* LoweringContext::dynamicSharedStart() {
  if (!shared_) {
    auto* type = llvm::ArrayType::get(b.getInt8Ty(), 0);
    shared_ = new llvm::GlobalVariable(module, type, false, llvm::GlobalValue::ExternalLinkage, nullptr,
                                       "attnjit_shared", nullptr, llvm::GlobalVariable::NotThreadLocal, 3);
    shared_->setAlignment(llvm::Align(warpgroupOperands ? 1024 : 16));
  }
  return shared_;
}

llvm::Value* LoweringContext::sharedStart() {
  if (sharedPrefixBytes == 0) return dynamicSharedStart();
  return b.CreateConstInBoundsGEP1_64(b.getInt8Ty(), dynamicSharedStart(), static_cast<uint64_t>(sharedPrefixBytes));
}

int LoweringContext::numThreads() const {
  return (numWarps + (warpSpecialization ? warpSpecialization->producerWarps : 0)) * 32;
}

llvm::Value* LoweringContext::sharedBase() {
  // The producer warps' code never touches the scratch area (no barrier covers them).
  if (role == Role::Producer) warpSpecialization->failed = true;
  if (asyncBufferBytes == 0 || buffersReleased) return sharedStart();
  return b.CreateConstInBoundsGEP1_64(b.getInt8Ty(), sharedStart(), static_cast<uint64_t>(asyncBufferBytes));
}

void LoweringContext::barrier() {
  if (role == Role::Producer) warpSpecialization->failed = true;
  if (role == Role::Consumer) {
    b.CreateIntrinsic(b.getVoidTy(), llvm::Intrinsic::nvvm_barrier_cta_sync_aligned_count,
                      {i32(kComputeWarpsBarrier), i32(numWarps * 32)});
    return;
  }
  b.CreateIntrinsic(b.getVoidTy(), llvm::Intrinsic::nvvm_barrier_cta_sync_aligned_all, {i32(0)});
}

void collectUses(const Block& block, UseMap& uses) {
  for (const auto& op : block.operations()) {
    for (const Value* operand : op->operands()) uses[operand].push_back(op.get());
    for (const auto& region : op->regions()) collectUses(*region, uses);
  }
}

void lowerOperation(LoweringContext& ctx, const Operation& op) {
  waitForWarpgroupResults(ctx, op);
  materializeAsyncTiles(ctx, op);
  SharedOperandReads sharedOperandReads(ctx, op);
  switch (op.opcode()) {
#define ATTNJIT_OP(Enum, spelling, Family) \
  case Opcode::Enum:                       \
    lower##Family(ctx, op);                \
    break;
#include "ir/Ops.def"
  }
}

namespace {
// Ops of a warp-specialized kernel that only the producer warps' copies use.
bool producerOnly(const LoweringContext& ctx, const Operation& op) {
  return ctx.role == LoweringContext::Role::Consumer && ctx.warpSpecialization->producerOnly.count(&op);
}
}  // namespace

void lowerBlock(LoweringContext& ctx, const Block& block) {
  forgetSlotWaits(ctx, block);
  for (const auto& op : block.operations())
    if (!ctx.loweredAhead.erase(op.get()) && !producerOnly(ctx, *op)) lowerOperation(ctx, *op);
}

namespace {

// Whether `op` reads a buffer of the kernel's own: an
// async tile, a shared operand, or a conversion planned to share a store.
bool readsOwnBuffer(const LoweringContext& ctx, const Operation& op) {
  if (ctx.sharedConversions && ctx.sharedConversions->converts.count(&op)) return true;
  for (const Value* operand : op.operands())
    if (const Lowered* lowered = ctx.find(operand); lowered && (lowered->isAsync() || lowered->isSharedOperand()))
      return true;
  return false;
}

}  // namespace

void lowerKernelBody(LoweringContext& ctx, const Block& body) {
  const auto& ops = body.operations();
  size_t lastLoop = ops.size();
  for (size_t i = 0; i < ops.size(); ++i)
    if (ops[i]->opcode() == Opcode::For) lastLoop = i;
  size_t release = ops.size();  // the first op that runs with the buffers released
  for (size_t i = 0; i < ops.size(); ++i) {
    // Every thread is past its last read of the buffers before any thread
    // writes scratch over them: each scratch use starts with a barrier.
    if (i == release) ctx.buffersReleased = true;
    const Operation& op = *ops[i];
    if (!ctx.loweredAhead.erase(&op) && !producerOnly(ctx, op)) lowerOperation(ctx, op);
    if (i != lastLoop || !(ctx.async || ctx.sharedOperands || ctx.sharedConversions)) continue;
    // Below the last loop: after the last op that reads a buffer. Values defined
    // down there are never buffers, so the operands lowered by now decide; ops
    // with regions may define and read async tiles of their own.
    release = i + 1;
    for (size_t j = i + 1; j < ops.size(); ++j)
      if (!ops[j]->regions().empty() || readsOwnBuffer(ctx, *ops[j])) release = j + 1;
  }
}

// ---- grid, constants ----

void lowerGridQuery(LoweringContext& ctx, const Operation& op) {
  int64_t axis = op.attrs().getInt("axis");
  using namespace llvm;
  static constexpr Intrinsic::ID kCtaId[] = {Intrinsic::nvvm_read_ptx_sreg_ctaid_x,
                                             Intrinsic::nvvm_read_ptx_sreg_ctaid_y,
                                             Intrinsic::nvvm_read_ptx_sreg_ctaid_z};
  static constexpr Intrinsic::ID kNctaId[] = {Intrinsic::nvvm_read_ptx_sreg_nctaid_x,
                                              Intrinsic::nvvm_read_ptx_sreg_nctaid_y,
                                              Intrinsic::nvvm_read_ptx_sreg_nctaid_z};
  Intrinsic::ID id = op.opcode() == Opcode::ProgramId ? kCtaId[axis] : kNctaId[axis];
  ctx.set(op.result(), Lowered{{ctx.b.CreateIntrinsic(ctx.b.getInt32Ty(), id, {})}, std::nullopt});
}

namespace {
llvm::Value* constantOf(LoweringContext& ctx, const Type& t, const AttrValue& value) {
  llvm::Type* ty = ctx.elementType(t.elementType());
  ScalarKind k = t.scalarKind();
  double d = std::holds_alternative<double>(value) ? std::get<double>(value)
                                                   : static_cast<double>(std::get<int64_t>(value));
  // fp8 values live in i8 registers: the constant is its encoding (RNE, saturating,
  // as the interpreter rounds it).
  if (k == ScalarKind::F8E4M3 || k == ScalarKind::F8E5M2)
    return llvm::ConstantInt::get(ty, ir::encodeFloat(d, k));
  if (isFloat(k)) return llvm::ConstantFP::get(ty, d);
  if (k == ScalarKind::I1) return ctx.b.getInt1(d != 0);
  int64_t i = std::holds_alternative<int64_t>(value) ? std::get<int64_t>(value) : static_cast<int64_t>(d);
  return llvm::ConstantInt::get(ty, static_cast<uint64_t>(i), true);
}

void setConstant(LoweringContext& ctx, const Operation& op, const AttrValue& value) {
  const Type& t = op.result()->type();
  llvm::Value* c = constantOf(ctx, t, value);
  if (!t.isTile()) {
    ctx.set(op.result(), Lowered{{c}, std::nullopt});
    return;
  }
  LinearLayout ll = ctx.linearLayout(t, op);
  ctx.set(op.result(), Lowered{std::vector<llvm::Value*>(static_cast<size_t>(ll.numRegisters()), c), ll});
}
}  // namespace

void lowerConstant(LoweringContext& ctx, const Operation& op) {
  setConstant(ctx, op, *op.attrs().find("value"));
}

void lowerConstexpr(LoweringContext& ctx, const Operation& op) {
  const Constexpr* c = ctx.kernel.findConstexpr(op.attrs().getString("name"));
  AttrValue v = std::holds_alternative<int64_t>(c->value) ? AttrValue(std::get<int64_t>(c->value))
                                                          : AttrValue(std::get<double>(c->value));
  setConstant(ctx, op, v);
}

// ---- control flow ----

void lowerYield(LoweringContext& ctx, const Operation& op) {
  ctx.yielded.clear();
  for (Value* v : op.operands()) ctx.yielded.push_back(ctx.get(v));
}

void lowerReturn(LoweringContext& ctx, const Operation&) { ctx.b.CreateRetVoid(); }

void lowerFor(LoweringContext& ctx, const Operation& op) {
  llvm::IRBuilder<>& b = ctx.b;
  llvm::Value* lo = ctx.scalar(op.operand(0));
  llvm::Value* hi = ctx.scalar(op.operand(1));
  llvm::Value* step = ctx.scalar(op.operand(2));
  llvm::BasicBlock* pre = b.GetInsertBlock();
  llvm::BasicBlock* body = llvm::BasicBlock::Create(ctx.llvm, "for.body", ctx.function);
  llvm::BasicBlock* exit = llvm::BasicBlock::Create(ctx.llvm, "for.exit", ctx.function);
  beginTurns(ctx, op);  // the hand-over precedes the loop: pre stays the insert block
  b.CreateCondBr(b.CreateICmpSLT(lo, hi), body, exit);

  b.SetInsertPoint(body);
  const Block& region = *op.region(0);
  llvm::PHINode* iv = b.CreatePHI(lo->getType(), 2, region.argument(0)->name());
  iv->addIncoming(lo, pre);
  ctx.set(region.argument(0), Lowered{{iv}, std::nullopt});
  std::vector<Lowered> inits;
  std::vector<std::vector<llvm::PHINode*>> phis;
  for (size_t i = 0; i + 3 < op.numOperands(); ++i) {
    Lowered init = ctx.get(op.operand(3 + i));
    Lowered carried = init;
    phis.emplace_back();
    for (auto& reg : carried.regs) {
      llvm::PHINode* phi = b.CreatePHI(reg->getType(), 2);
      phi->addIncoming(reg, pre);
      phis.back().push_back(phi);
      reg = phi;
    }
    ctx.set(region.argument(1 + i), carried);
    inits.push_back(std::move(init));
  }
  beginAsyncLoop(ctx, op);
  lowerBlock(ctx, region);
  finishTurnIteration(ctx, op);
  releaseSlots(ctx, op);
  std::vector<Lowered> yielded = ctx.yielded;
  llvm::Value* next = b.CreateAdd(iv, step);
  llvm::BasicBlock* latch = b.GetInsertBlock();
  b.CreateCondBr(b.CreateICmpSLT(next, hi), body, exit);
  iv->addIncoming(next, latch);

  b.SetInsertPoint(exit);
  for (size_t i = 0; i < phis.size(); ++i) {
    ATTNJIT_CHECK(yielded[i].regs.size() == phis[i].size(), "codegen: loop-carried register count changed");
    Lowered result = yielded[i];
    for (size_t r = 0; r < phis[i].size(); ++r) {
      phis[i][r]->addIncoming(yielded[i].regs[r], latch);
      llvm::PHINode* out = b.CreatePHI(phis[i][r]->getType(), 2);
      out->addIncoming(inits[i].regs[r], pre);
      out->addIncoming(yielded[i].regs[r], latch);
      result.regs[r] = out;
    }
    ctx.set(op.result(i), result);
  }
  endTurns(ctx, op);
  finishAsyncLoop(ctx, op);  // after the result phis, which head the exit block
}

void lowerIf(LoweringContext& ctx, const Operation& op) {
  llvm::IRBuilder<>& b = ctx.b;
  llvm::BasicBlock* thenBlock = llvm::BasicBlock::Create(ctx.llvm, "if.then", ctx.function);
  llvm::BasicBlock* elseBlock = llvm::BasicBlock::Create(ctx.llvm, "if.else", ctx.function);
  llvm::BasicBlock* merge = llvm::BasicBlock::Create(ctx.llvm, "if.end", ctx.function);
  b.CreateCondBr(ctx.scalar(op.operand(0)), thenBlock, elseBlock);
  std::vector<Lowered> results[2];
  llvm::BasicBlock* ends[2];
  llvm::BasicBlock* starts[2] = {thenBlock, elseBlock};
  for (int side = 0; side < 2; ++side) {
    b.SetInsertPoint(starts[side]);
    lowerBlock(ctx, *op.region(side));
    results[side] = ctx.yielded;
    ends[side] = b.GetInsertBlock();
    b.CreateBr(merge);
  }
  b.SetInsertPoint(merge);
  for (size_t i = 0; i < op.numResults(); ++i) {
    Lowered out = results[0][i];
    for (size_t r = 0; r < out.regs.size(); ++r) {
      llvm::PHINode* phi = b.CreatePHI(out.regs[r]->getType(), 2);
      phi->addIncoming(results[0][i].regs[r], ends[0]);
      phi->addIncoming(results[1][i].regs[r], ends[1]);
      out.regs[r] = phi;
    }
    ctx.set(op.result(i), out);
  }
}

// ---- the driver ----

namespace {

// Codegen's stages, in order. generatePtx below runs exactly these.
constexpr CodegenStage kStages[] = {
    {"plan-async-copies",
     "pipelined tile loads that become cp.async copies into two swizzled shared-memory slots each "
     "(kernel attribute async_copy)"},
    {"plan-warp-specialization",
     "producer warps that issue the cp.async copies, handing slots to the compute warps through mbarriers "
     "(kernel attribute warp_specialize, sm_90a)"},
    {"plan-shared-operands",
     "loop-invariant mma operands kept in shared memory and read next to each mma "
     "(kernel attribute shared_invariant_operands)"},
    {"plan-shared-conversions",
     "a register tile converted into several layouts (also through a transpose) stored once into shared memory "
     "of its own, each conversion reading it back"},
    {"lower", "tile IR to LLVM IR: every tile value becomes the registers of its layout; NVVM intrinsics"},
    {"fit-shared-memory",
     "slots, operands, conversion buffers and scratch must fit the target's shared memory per block; else the "
     "plans start again with the operands and conversions in registers, then with the pipelined tiles in registers"},
    {"llvm-pipeline", "LLVM's middle end: the fast pipeline or O3 (ATTNJIT_LLVM_PIPELINE)"},
    {"erase-unused-ldmatrix", "ldmatrix reads of shared slots whose results the middle end left unused"},
    {"rematerialize-loop-crossing-predicates",
     "conditions used after a loop are recomputed there rather than kept live through it"},
    {"sink-slot-reads",
     "reads of cp.async slots, shared operands and conversion buffers moved next to their use "
     "(kernel attribute sink_slot_reads)"},
    {"remove-redundant-sync",
     "barriers and cp.async waits that repeat one with nothing in between (kernel attribute remove_redundant_sync)"},
    {"emit-ptx", "the NVPTX backend: instruction selection, register allocation, PTX text"},
};

using Clock = std::chrono::steady_clock;

// Times stages and prints after them as CodegenOptions asks.
class StageRecorder {
 public:
  StageRecorder(const CodegenOptions& options, CodegenResult& result) : options_(options), result_(result) {}

  // Runs `stage` (one of kStages) and records its time.
  template <typename F>
  void run(const char* name, F&& stage) {
    const auto start = Clock::now();
    stage();
    result_.stageTimings.push_back({name, std::chrono::duration<double, std::milli>(Clock::now() - start).count()});
  }

  bool printsAfter(const char* name) const {
    return options_.dump && (options_.printAfterAll || options_.printAfter == name);
  }
  void printAfter(const char* name, const std::function<std::string()>& text) const {
    if (printsAfter(name)) options_.dump("// -----// IR after " + std::string(name) + " //----- //\n" + text());
  }

 private:
  const CodegenOptions& options_;
  CodegenResult& result_;
};

// Which shared-memory buffers of their own a lowering attempt may plan.
struct BufferChoice {
  bool asyncCopy;
  bool sharedOperands;
  const char* description;
};
// fit-shared-memory's attempts, in order: the operands go back to registers
// first (a D=256 Q tile is 64 KiB), then the pipelined tiles (e.g. 128-key fp8
// tiles on the 99 KiB of sm_86/89/120).
constexpr BufferChoice kBufferChoices[] = {
    {true, true, "cp.async slots and shared operands"},
    {true, false, "cp.async slots, operands in registers"},
    {false, false, "pipelined tiles and operands in registers"},
};

// One lowering attempt: a module holding the lowered kernel, or the shared bytes
// its buffers would need when they do not fit.
struct LoweringAttempt {
  std::unique_ptr<llvm::Module> module;
  std::unique_ptr<llvm::TargetMachine> tm;
  std::unique_ptr<LoweringContext> ctx;
  int64_t sharedBytes = 0;
  SharedMemoryUse use;
  WarpSchedule schedule;
  bool fits = true;
  bool warpSpecializationFailed = false;  // lower again without producer warps
};

support::Expected<LoweringAttempt> lowerKernel(llvm::LLVMContext& context, const Kernel& kernel,
                                               const CodegenOptions& options, const BufferChoice& choice,
                                               bool warpSpecialize, StageRecorder& stages) {
  LoweringAttempt attempt;
  attempt.module = std::make_unique<llvm::Module>(kernel.name(), context);
  auto tm = createNvptxTargetMachine(options.target, options.ptxVersion);
  if (!tm) return tm.status();
  attempt.tm = std::move(*tm);
  prepareModule(*attempt.module, *attempt.tm);

  attempt.ctx = std::make_unique<LoweringContext>(context, *attempt.module, kernel, options.target);
  LoweringContext& ctx = *attempt.ctx;
  ctx.allowAsyncCopy = choice.asyncCopy;
  ctx.allowSharedOperands = choice.sharedOperands;
  // Producer warps never reach a cluster barrier, which every live thread of
  // the cluster must (cluster_reduce_*): cluster kernels have none.
  const int64_t clusterSize = kernelAttribute(kernel, KernelAttribute::ClusterSize);
  ctx.allowWarpSpecialization = warpSpecialize && clusterSize == 1;
  ctx.axis = std::make_unique<AxisInfo>(kernel);
  planTensorMaps(ctx);
  if (!ctx.status) return ctx.status;
  std::vector<llvm::Type*> params;
  for (size_t i = 0; i < kernel.numParameters(); ++i) params.push_back(ctx.elementType(kernel.parameter(i)->type()));
  for (size_t i = 0; i < ctx.tensorMapRecipes.size(); ++i) params.push_back(ctx.b.getPtrTy());
  auto* fnType = llvm::FunctionType::get(ctx.b.getVoidTy(), params, false);
  ctx.function = llvm::Function::Create(fnType, llvm::Function::ExternalLinkage, kernel.name(), *attempt.module);
  ctx.function->setCallingConv(llvm::CallingConv::PTX_Kernel);
  ctx.function->addFnAttr("nvvm.maxntid", std::to_string(ctx.numWarps * 32) + ",1,1");
  // `.reqnctapercluster 1, 1, C`: the launch groups programs z = C·k ... C·k + C − 1.
  if (clusterSize > 1) ctx.function->addFnAttr("nvvm.cluster_dim", "1,1," + std::to_string(clusterSize));
  for (size_t i = 0; i < kernel.numParameters(); ++i) {
    llvm::Argument* arg = ctx.function->getArg(static_cast<unsigned>(i));
    arg->setName(kernel.parameter(i)->name());
    const AttrValue* align = kernel.parameterAttrs(i).find("align");
    if (align && kernel.parameter(i)->type().isPointer() && std::holds_alternative<int64_t>(*align))
      arg->addAttr(llvm::Attribute::getWithAlignment(context, llvm::Align(std::get<int64_t>(*align))));
    ctx.set(kernel.parameter(i), Lowered{{arg}, std::nullopt});
  }
  // Tensor maps: 128 bytes by value in the parameter space (.param .align 64
  // .b8 [128]), which the TMA copies address directly.
  for (size_t i = 0; i < ctx.tensorMapRecipes.size(); ++i) {
    llvm::Argument* arg = ctx.function->getArg(ctx.firstTensorMapArgument + static_cast<unsigned>(i));
    arg->setName("tensor_map_" + std::to_string(i));
    arg->addAttr(llvm::Attribute::getWithByValType(context, llvm::ArrayType::get(ctx.b.getInt8Ty(), 128)));
    arg->addAttr(llvm::Attribute::getWithAlignment(context, llvm::Align(64)));
    arg->addAttr(llvm::Attribute::get(context, "nvvm.grid_constant"));
  }

  llvm::BasicBlock* entry = llvm::BasicBlock::Create(context, "entry", ctx.function);
  llvm::BasicBlock* start = llvm::BasicBlock::Create(context, "start", ctx.function);
  llvm::IRBuilder<> entryBuilder(entry);
  llvm::BranchInst* toStart = entryBuilder.CreateBr(start);
  entryBuilder.SetInsertPoint(toStart);
  ctx.entryBuilder = &entryBuilder;
  ctx.threadId = entryBuilder.CreateIntrinsic(entryBuilder.getInt32Ty(), llvm::Intrinsic::nvvm_read_ptx_sreg_tid_x, {});
  ctx.laneId = entryBuilder.CreateAnd(ctx.threadId, 31, "lane");
  ctx.warpId = entryBuilder.CreateLShr(ctx.threadId, 5, "warp");
  if (ctx.target.hasGridDependencyControl) {
    // A launch as a programmatic dependent (runtime LaunchConfig::overlapPriorGrid)
    // lets this grid start while the kernel before it in the stream drains; every
    // CTA waits here, before any memory access, until that kernel completed and
    // its writes are visible (outside such a launch the wait returns at once).
    // The trigger then lets the next such launch start early in turn: it too
    // waits for this grid's completion before reading anything.
    InlinePtx(entryBuilder, "griddepcontrol.wait;").sideEffects().emitAll();
    InlinePtx(entryBuilder, "griddepcontrol.launch_dependents;").sideEffects().emitAll();
  }
  ctx.b.SetInsertPoint(start);

  stages.run("plan-async-copies", [&] { planAsyncCopies(ctx); });
  stages.printAfter("plan-async-copies", [&] { return describeAsyncCopyPlan(ctx); });
  if (!ctx.status) return ctx.status;
  std::string noWarpSpecialization;
  stages.run("plan-warp-specialization", [&] { planWarpSpecialization(ctx, noWarpSpecialization); });
  stages.printAfter("plan-warp-specialization",
                    [&] { return describeWarpSpecializationPlan(ctx, noWarpSpecialization); });
  // Only producer warps cast tiles on the way (AsyncBuffer::castOnCopy): a
  // kernel that ends up without them is planned again without casting copies.
  if (!ctx.warpSpecialization && ctx.async &&
      std::any_of(ctx.async->buffers.begin(), ctx.async->buffers.end(),
                  [](const AsyncBuffer& buffer) { return buffer.castOnCopy != nullptr || buffer.tensorCopy; })) {
    attempt.warpSpecializationFailed = true;
    return attempt;
  }
  if (ctx.warpSpecialization) {
    ctx.function->addFnAttr("nvvm.maxntid", std::to_string(ctx.numThreads()) + ",1,1");
    // setmaxnreg needs the launch's register count fixed.
    if (ctx.warpSpecialization->consumerRegisters != 0)
      ctx.function->addFnAttr("nvvm.maxnreg", std::to_string(ctx.warpSpecialization->entryRegisters));
  }
  const int64_t slotsEnd = ctx.asyncBufferBytes;
  stages.run("plan-shared-operands", [&] { planSharedOperands(ctx); });
  stages.printAfter("plan-shared-operands", [&] { return describeSharedOperandPlan(ctx); });
  const int64_t operandsEnd = ctx.asyncBufferBytes;
  stages.run("plan-shared-conversions", [&] { planSharedConversions(ctx); });
  stages.printAfter("plan-shared-conversions", [&] { return describeSharedConversionPlan(ctx); });
  if (ctx.warpSpecialization) {
    const int64_t align = ctx.warpgroupOperands ? kWarpgroupOperandAlign : 16;
    ctx.sharedPrefixBytes = (ctx.warpSpecialization->barrierBytes() + align - 1) / align * align;
  }
  stages.run("lower", [&] {
    if (ctx.warpSpecialization) lowerProducerRole(ctx, kernel.body());
    lowerKernelBody(ctx, kernel.body());
  });
  ctx.entryBuilder = nullptr;
  if (ctx.warpSpecialization && ctx.warpSpecialization->failed) {
    attempt.warpSpecializationFailed = true;
    return attempt;
  }
  if (!ctx.status) return ctx.status;
  attempt.sharedBytes = ctx.totalSharedBytes();
  attempt.use = {static_cast<int>(ctx.sharedPrefixBytes + slotsEnd), static_cast<int>(operandsEnd - slotsEnd),
                 static_cast<int>(ctx.asyncBufferBytes - operandsEnd), static_cast<int>(ctx.sharedBytes)};
  attempt.schedule.computeWarps = ctx.numWarps;
  if (ctx.async && !ctx.async->buffers.empty()) {
    attempt.schedule.asyncBuffers = static_cast<int>(ctx.async->buffers.size());
    attempt.schedule.slotsPerBuffer = ctx.async->buffers.front().slots;
  }
  if (const WarpSpecializationPlan* plan = ctx.warpSpecialization.get()) {
    attempt.schedule.producerWarps = plan->producerWarps;
    attempt.schedule.computeRegisters = plan->consumerRegisters;
    attempt.schedule.producerRegisters = plan->producerRegisters;
    attempt.schedule.pingPong = !plan->turnLoops.empty();
  }
  // Only the buffers of their own can be given up; the scratch area is the floor.
  attempt.fits = !(ctx.async || ctx.sharedOperands || ctx.sharedConversions) ||
                 attempt.sharedBytes <= options.target.maxSharedBytesPerBlock;
  if (attempt.fits) stages.printAfter("lower", [&] { return printModule(*attempt.module); });
  return attempt;
}

}  // namespace

std::span<const CodegenStage> codegenStages() { return kStages; }

support::Expected<CodegenResult> generatePtx(const Kernel& kernel, const CodegenOptions& options) {
  if (const int64_t clusterSize = kernelAttribute(kernel, KernelAttribute::ClusterSize);
      clusterSize > 1 && options.target.computeCapability < 90)
    return support::Diagnostic{{}, "cluster_size " + std::to_string(clusterSize) +
                                       ": thread-block clusters need sm_90 or newer, not " + options.target.name};
  CodegenResult result;
  StageRecorder stages(options, result);
  const auto t0 = Clock::now();
  llvm::LLVMContext context;

  // plan-async-copies, plan-warp-specialization, plan-shared-operands, lower and fit-shared-memory.
  LoweringAttempt attempt;
  std::string fitLog;
  for (const BufferChoice& choice : kBufferChoices) {
    auto lowered = lowerKernel(context, kernel, options, choice, /*warpSpecialize=*/true, stages);
    if (lowered && lowered->warpSpecializationFailed)
      lowered = lowerKernel(context, kernel, options, choice, /*warpSpecialize=*/false, stages);
    if (!lowered) return lowered.status();
    attempt = std::move(*lowered);
    fitLog += std::string(choice.description) + ": " + std::to_string(attempt.sharedBytes) + " B of " +
              std::to_string(options.target.maxSharedBytesPerBlock) +
              (attempt.sharedBytes <= options.target.maxSharedBytesPerBlock ? ", fits\n" : ", too large\n");
    if (attempt.fits) break;
  }
  stages.run("fit-shared-memory", [] {});
  stages.printAfter("fit-shared-memory", [&] { return fitLog; });
  ATTNJIT_CHECK(attempt.fits, "codegen: a kernel without buffers of its own exceeds shared memory");
  // What is left is the scratch area (staged output tiles, row statistics,
  // pipelined tiles), which no lowering gives up: a kernel that needs more than
  // the target allows could never launch.
  if (attempt.sharedBytes > options.target.maxSharedBytesPerBlock)
    return support::Diagnostic{{}, "the kernel needs " + std::to_string(attempt.sharedBytes) +
                                       " bytes of shared memory per block even without buffers of its own; " +
                                       options.target.name + " allows " +
                                       std::to_string(options.target.maxSharedBytesPerBlock) +
                                       " (fewer query rows or keys per tile need less)"};

  llvm::Module& module = *attempt.module;
  LoweringContext& ctx = *attempt.ctx;
  result.kernelName = kernel.name();
  result.numThreads = ctx.numThreads();
  result.sharedMemoryBytes = static_cast<int>(attempt.sharedBytes);
  result.sharedMemoryUse = attempt.use;
  result.warpSchedule = attempt.schedule;
  result.tensorMaps = tensorMapRecipesText(ctx);
  if (support::Status s = verifyLlvmModule(module); !s) return s;
  if (options.printLlvmIr) result.llvmIr = printModule(module);
  const auto t1 = Clock::now();
  result.lowerMs = std::chrono::duration<double, std::milli>(t1 - t0).count();

  auto printIr = [&] { return printModule(module); };
  if (options.optimize) {
    support::Status optimized = support::Status::ok();
    stages.run("llvm-pipeline", [&] { optimized = optimizeModule(module, *attempt.tm, options.llvmPipeline); });
    if (!optimized) return optimized;
    stages.printAfter("llvm-pipeline", printIr);
  }
  stages.run("erase-unused-ldmatrix", [&] { eraseUnusedMatrixLoads(*ctx.function); });
  stages.printAfter("erase-unused-ldmatrix", printIr);
  // After LLVM's passes, whose CSE would merge the copies back.
  stages.run("rematerialize-loop-crossing-predicates", [&] { rematerializeLoopCrossingPredicates(*ctx.function); });
  stages.printAfter("rematerialize-loop-crossing-predicates", printIr);
  // After LLVM's passes, which keep the order of calls: see SinkSlotReads.cpp.
  if ((ctx.async || ctx.sharedOperands || ctx.sharedConversions) &&
      ir::kernelFlag(kernel, ir::KernelAttribute::SinkSlotReads)) {
    stages.run("sink-slot-reads", [&] { sinkSlotReads(*ctx.function); });
    stages.printAfter("sink-slot-reads", printIr);
  }
  // After sinking, which moves reads out from between barriers: see RedundantSync.cpp.
  if (ir::kernelFlag(kernel, ir::KernelAttribute::RemoveRedundantSync)) {
    stages.run("remove-redundant-sync", [&] { removeRedundantSync(*ctx.function); });
    stages.printAfter("remove-redundant-sync", printIr);
  }
  if (options.printLlvmIr) result.llvmIrOptimized = printModule(module);
  const auto t2 = Clock::now();
  result.optimizeMs = std::chrono::duration<double, std::milli>(t2 - t1).count();

  // LlvmPipeline chooses middle end and backend together; unoptimized is plain.
  support::Expected<std::string> ptx = support::Diagnostic{};
  stages.run("emit-ptx", [&] {
    ptx = emitPtx(module, *attempt.tm, options.optimize ? options.llvmPipeline : LlvmPipeline::O3);
  });
  if (!ptx) return ptx.status();
  result.ptx = std::move(*ptx);
  stages.printAfter("emit-ptx", [&] { return result.ptx; });
  result.emitMs = std::chrono::duration<double, std::milli>(Clock::now() - t2).count();
  return result;
}

}  // namespace attnjit::codegen
