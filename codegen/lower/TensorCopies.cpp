// TMA copies of load_tensor tiles in warp-specialized kernels.
//
// expand-tensor-loads keeps a load_tensor only where a box copy can do it
// exactly (compiler/passes/ExpandTensorLoads.cpp); the cp.async plan gives
// its pipelined tile a slot of 128-byte column blocks that wgmma reads
// (AsyncBuffer::tensorCopy), and here:
//
// - Each distinct tensor (base, extents, strides, element, box) becomes a
//   kernel parameter after the kernel's own: a 128-byte CUtensorMap passed by
//   value (`.param .align 64 .b8 [128]`, a byval argument marked
//   nvvm.grid_constant, which the copies address in the parameter space). The
//   host encodes it at every launch from the recipe recorded with the kernel
//   (runtime/TensorMap.h: which arguments hold the base, extents and strides),
//   so a launcher passes the same arguments as for the cp.async kernel.
// - The box is 64 elements (128 bytes, the swizzle's span) by the rows of one
//   gathered entry (a cache block's tokens), 1 along every other dimension;
//   with the 128-byte swizzle it lands as that many rows of the slot's column
//   block, in the pattern wgmma's descriptors read (chunk c of row r at c xor
//   r mod 8 on absolute addresses: the slot is 1024-byte aligned and each box
//   starts a multiple of 8 rows into it).
// - Producer thread 0 arms the slot's full barrier with the tile's bytes
//   (mbarrier.arrive.expect_tx: its arrival) and issues the boxes, which
//   complete the transaction count as they land; the other producer threads
//   arrive, so the barrier's count (one per producer thread) is that of the
//   cp.async protocol. Boxes of entries outside the tensor (a block number of
//   -1) land as zeros and count their bytes all the same.
// - The compute warps wait on the full barrier as for any slot; TMA writes
//   through the async proxy that wgmma reads, so no proxy fence follows.
// - At the loop's exit the producers wait for the fill nobody reads (the
//   prefetch past the last tile), since the slots are reused after the loop.
#include "codegen/lower/TensorCopies.h"

#include <llvm/IR/IntrinsicsNVPTX.h>

#include <map>
#include <optional>

#include "codegen/lower/AsyncCopy.h"
#include "codegen/lower/WarpSpecialization.h"
#include "ir/LoadTensor.h"

namespace attnjit::codegen {

using namespace ir;

namespace {

constexpr int kSwizzleSpanBytes = 128;

// The recipe text of a value the host knows at launch (runtime/TensorMap.h's
// Source): a kernel parameter "p<index>:<bytes>" or a constant "c<value>".
std::optional<std::string> hostSource(const Kernel& kernel, const Value* value) {
  auto known = hostValue(kernel, value);
  if (!known) return std::nullopt;
  if (known->parameter < 0) return "c" + std::to_string(known->constant);
  const Type& type = value->type();
  const int bytes = type.isPointer() || type.scalarKind() == ScalarKind::I64 ? 8 : 4;
  return "p" + std::to_string(known->parameter) + ":" + std::to_string(bytes);
}

int64_t rowsPerEntry(const Operation& load) {
  const LoadTensorOperands t = loadTensorOperands(load);
  const int64_t R = load.result()->type().shape()[0];
  return t.gatherDim >= 0 ? R / t.coords[static_cast<size_t>(t.gatherDim)]->type().shape()[0] : R;
}

// The box in elements per dimension, innermost first.
std::vector<int64_t> boxOf(const Operation& load) {
  const LoadTensorOperands t = loadTensorOperands(load);
  std::vector<int64_t> box(static_cast<size_t>(t.rank()), 1);
  box[0] = kSwizzleSpanBytes / storageBytes(load.result()->type().scalarKind());
  box[static_cast<size_t>(t.rowsDim)] = rowsPerEntry(load);
  return box;
}

std::optional<std::string> recipeOf(const Kernel& kernel, const Operation& load) {
  const LoadTensorOperands t = loadTensorOperands(load);
  const ScalarKind element = load.result()->type().scalarKind();
  std::string text = element == ScalarKind::BF16 ? "bf16" : element == ScalarKind::F16 ? "f16" : "";
  if (text.empty()) return std::nullopt;
  auto sources = [&](const std::vector<Value*>& values) -> std::optional<std::string> {
    std::string out;
    for (size_t i = 0; i < values.size(); ++i) {
      auto source = hostSource(kernel, values[i]);
      if (!source) return std::nullopt;
      out += (i ? "," : "") + *source;
    }
    return out;
  };
  auto address = hostSource(kernel, t.base);
  auto dims = sources(t.dims);
  auto strides = sources(t.strides);
  if (!address || !dims || !strides) return std::nullopt;
  std::string box;
  for (int64_t size : boxOf(load)) box += (box.empty() ? "" : ",") + std::to_string(size);
  return text + " address=" + *address + " dims=" + *dims + " strides=" + *strides + " box=" + box +
         " swizzle=" + std::to_string(kSwizzleSpanBytes);
}

void collectTensorLoads(const Block& block, std::vector<const Operation*>& loads) {
  for (const auto& op : block.operations()) {
    if (op->opcode() == Opcode::LoadTensor) loads.push_back(op.get());
    for (const auto& region : op->regions()) collectTensorLoads(*region, loads);
  }
}

const llvm::Intrinsic::ID kTileCopies[] = {
    llvm::Intrinsic::nvvm_cp_async_bulk_tensor_g2s_tile_1d, llvm::Intrinsic::nvvm_cp_async_bulk_tensor_g2s_tile_2d,
    llvm::Intrinsic::nvvm_cp_async_bulk_tensor_g2s_tile_3d, llvm::Intrinsic::nvvm_cp_async_bulk_tensor_g2s_tile_4d,
    llvm::Intrinsic::nvvm_cp_async_bulk_tensor_g2s_tile_5d};

// A uniform scalar as the producer's first stand-in lowered it.
llvm::Value* producerScalar(LoweringContext& ctx, const Value* value) {
  return ctx.warpSpecialization->views.front().values.at(value).regs.at(0);
}

}  // namespace

void planTensorMaps(LoweringContext& ctx) {
  std::vector<const Operation*> loads;
  collectTensorLoads(ctx.kernel.body(), loads);
  std::map<std::string, int> index;
  for (const Operation* load : loads) {
    auto recipe = recipeOf(ctx.kernel, *load);
    if (!recipe) {
      ctx.unsupported(*load, "copied by TMA with a base, extent or stride the host cannot evaluate at launch (not a "
                             "kernel parameter, constant or constexpr)");
      return;
    }
    auto [it, added] = index.emplace(*recipe, static_cast<int>(ctx.tensorMapRecipes.size()));
    if (added) ctx.tensorMapRecipes.push_back(*recipe);
    ctx.tensorMapOf[load] = it->second;
  }
  ctx.firstTensorMapArgument = static_cast<unsigned>(ctx.kernel.numParameters());
}

std::string tensorMapRecipesText(const LoweringContext& ctx) {
  if (ctx.tensorMapRecipes.empty()) return {};
  std::string text = "first=" + std::to_string(ctx.firstTensorMapArgument);
  for (const std::string& recipe : ctx.tensorMapRecipes) text += "\n" + recipe;
  return text;
}

void issueTensorCopies(LoweringContext& ctx, const Operation& load, int id, llvm::Value* slot,
                       llvm::Value* fullBarrier) {
  llvm::IRBuilder<>& b = ctx.b;
  const LoadTensorOperands t = loadTensorOperands(load);
  const int rank = t.rank();
  const int64_t R = load.result()->type().shape()[0], C = load.result()->type().shape()[1];
  const int64_t elementBytes = storageBytes(load.result()->type().scalarKind());
  const int64_t columnsPerBox = kSwizzleSpanBytes / elementBytes;
  const int64_t entryRows = rowsPerEntry(load);
  const int64_t entries = R / entryRows;

  llvm::BasicBlock* issue = llvm::BasicBlock::Create(ctx.llvm, "tma.issue", ctx.function);
  llvm::BasicBlock* others = llvm::BasicBlock::Create(ctx.llvm, "tma.arrive", ctx.function);
  llvm::BasicBlock* done = llvm::BasicBlock::Create(ctx.llvm, "tma.done", ctx.function);
  b.CreateCondBr(b.CreateICmpEQ(ctx.threadId, ctx.i32(ctx.numWarps * 32)), issue, others);

  b.SetInsertPoint(issue);
  b.CreateIntrinsic(b.getInt64Ty(), llvm::Intrinsic::nvvm_mbarrier_arrive_expect_tx_scope_cta_space_cta,
                    {fullBarrier, ctx.i32(R * C * elementBytes)});
  llvm::Value* map = ctx.function->getArg(ctx.firstTensorMapArgument + static_cast<unsigned>(ctx.tensorMapOf.at(&load)));
  std::vector<llvm::Value*> coords(static_cast<size_t>(rank));
  for (int k = 0; k < rank; ++k)
    if (k != t.gatherDim) coords[static_cast<size_t>(k)] = producerScalar(ctx, t.coords[static_cast<size_t>(k)]);
  // Every thread holds every gathered coordinate (layout assignment gives the
  // tile a layout whose registers run through its elements in order).
  std::vector<llvm::Value*> gathered;
  if (t.gatherDim >= 0) {
    const Value* entriesValue = t.coords[static_cast<size_t>(t.gatherDim)];
    const Lowered& lowered = ctx.warpSpecialization->views.front().values.at(entriesValue);
    const LinearLayout layout = ctx.linearLayout(entriesValue->type(), load);
    bool inOrder = layout.numRegisters() == entries;
    for (size_t r = 0; inOrder && r < layout.reg.size(); ++r) inOrder = layout.reg[r][0] == (int64_t{1} << r);
    if (!inOrder) {
      ctx.unsupported(load, "copied by TMA with gathered coordinates that one thread does not hold in order");
      return;
    }
    gathered = lowered.regs;
  }
  Lowered slotValue;
  slotValue.regs = {slot};
  slotValue.asyncBuffer = id;
  llvm::Value* slotBase = asyncSlotAddress(ctx, slotValue);
  auto* clusterPtr = llvm::PointerType::get(ctx.llvm, 7);
  const llvm::Intrinsic::ID copy = kTileCopies[rank - 1];
  for (int64_t block = 0; block < C / columnsPerBox; ++block) {
    for (int64_t entry = 0; entry < entries; ++entry) {
      const int64_t offset = (block * R + entry * entryRows) * kSwizzleSpanBytes;
      llvm::Value* destination =
          b.CreateAddrSpaceCast(b.CreateConstInBoundsGEP1_64(b.getInt8Ty(), slotBase, static_cast<uint64_t>(offset)),
                                clusterPtr);
      std::vector<llvm::Value*> args = {destination, fullBarrier, map};
      for (int k = 0; k < rank; ++k) {
        llvm::Value* c = k == t.gatherDim ? gathered[static_cast<size_t>(entry)] : coords[static_cast<size_t>(k)];
        if (k == 0 && block > 0) c = b.CreateAdd(c, ctx.i32(block * columnsPerBox));
        args.push_back(c);
      }
      // No multicast, no cache hint, no CTA group.
      args.push_back(b.getInt16(0));
      args.push_back(b.getInt64(0));
      args.push_back(b.getFalse());
      args.push_back(b.getFalse());
      args.push_back(b.getInt32(0));
      b.CreateIntrinsic(b.getVoidTy(), copy, args);
    }
  }
  b.CreateBr(done);

  b.SetInsertPoint(others);
  b.CreateIntrinsic(b.getInt64Ty(), llvm::Intrinsic::nvvm_mbarrier_arrive_shared, {fullBarrier});
  b.CreateBr(done);
  b.SetInsertPoint(done);
}

}  // namespace attnjit::codegen
