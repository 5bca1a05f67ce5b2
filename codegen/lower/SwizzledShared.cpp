// Layout conversions of 2D tiles through a swizzled shared-memory tile.
//
// The tile is stored with one dimension contiguous (the one along which the
// source holds the longest run of consecutive elements per thread, so each
// thread writes whole vectors) in rows of 16-byte chunks. Chunk c of row r lives
// at chunk position c ^ phase(r), phase(r) = (r / perPhase) % maxPhase, chosen so
// that eight consecutive rows read at the same logical chunk hit eight distinct
// 16-byte bank groups (a 128-byte window): ldmatrix reads exactly that pattern
// (eight row addresses per 8×8 matrix), and the swizzle keeps vector writes of a
// row conflict-free because it only permutes chunks within 128 bytes.
//
// Reads use ldmatrix when the destination is a tensor-core operand fragment of
// 16-bit elements (the layout pattern of mma.sync's A and B operands: register
// bit 0 and lane bits 0-1 step along one dimension by 1, 2, 4, lane bits 2-4 along
// the other): non-transposed when the fragment's pairs run along the contiguous
// dimension, `.trans` otherwise (V in P·V). Any other destination reads vectors
// of consecutive elements.
#include <llvm/IR/IntrinsicsNVPTX.h>

#include "codegen/lower/SwizzledShared.h"

#include "codegen/lower/SinkSlotReads.h"

namespace attnjit::codegen {

using namespace ir;

namespace {

Coord unitCoord(int dim, int64_t value) {
  Coord c{0, 0, 0};
  c[dim] = value;
  return c;
}

// How many registers, starting at register 0, step along `dim` by 1, 2, 4, ...
int64_t contiguousRegisters(const LinearLayout& l, int dim) {
  size_t n = 0;
  while (n < l.reg.size() && l.reg[n] == unitCoord(dim, int64_t{1} << n)) ++n;
  return int64_t{1} << n;
}

// Every basis except the first log2(vec) register bases keeps `dim` a multiple of
// vec, so a run of vec registers starts at an aligned coordinate.
bool vectorsAligned(const LinearLayout& l, int dim, int64_t vec) {
  int skip = log2Exact(vec);
  auto aligned = [&](const Coord& c) { return c[dim] % vec == 0; };
  for (size_t i = static_cast<size_t>(skip); i < l.reg.size(); ++i)
    if (!aligned(l.reg[i])) return false;
  for (const Coord& c : l.lane)
    if (!aligned(c)) return false;
  for (const Coord& c : l.warp)
    if (!aligned(c)) return false;
  return true;
}

int64_t vectorWidth(const LinearLayout& l, int dim, int64_t maxElements) {
  int64_t vec = std::min(contiguousRegisters(l, dim), maxElements);
  while (vec > 1 && !vectorsAligned(l, dim, vec)) vec /= 2;
  return vec;
}


// The dimension the destination's fragment pairs run along (X) when `to` is an
// mma.sync operand fragment of 16-bit elements; -1 otherwise.
int ldmatrixPairDim(const LinearLayout& to) {
  if (to.rank() != 2 || to.reg.empty() || to.lane.size() != 5) return -1;
  for (int x = 0; x < 2; ++x) {
    int y = 1 - x;
    if (to.reg[0] == unitCoord(x, 1) && to.lane[0] == unitCoord(x, 2) && to.lane[1] == unitCoord(x, 4) &&
        to.lane[2] == unitCoord(y, 1) && to.lane[3] == unitCoord(y, 2) && to.lane[4] == unitCoord(y, 4))
      return x;
  }
  return -1;
}

// ldmatrix rows are 16-byte chunks: apart from the bases that step within a row
// (1, 2, 4 along the contiguous dimension), every basis must keep the contiguous
// coordinate a multiple of 8.
bool ldmatrixRowsAligned(const LinearLayout& to, int pairDim, int contigDim) {
  auto aligned = [&](const Coord& c) { return c[contigDim] % 8 == 0; };
  const bool transposed = pairDim != contigDim;
  for (size_t i = 0; i < to.reg.size(); ++i)
    if (!(i == 0 && !transposed) && !aligned(to.reg[i])) return false;
  for (size_t i = 0; i < to.lane.size(); ++i) {
    bool withinRow = transposed ? i >= 2 : i < 2;
    if (!withinRow && !aligned(to.lane[i])) return false;
  }
  for (const Coord& c : to.warp)
    if (!aligned(c)) return false;
  return true;
}

llvm::Value* elementAddress(LoweringContext& ctx, llvm::Value* base, llvm::Type* elementType, llvm::Value* offset) {
  return ctx.b.CreateGEP(elementType, base, offset);
}

// ldmatrix reads of `to` (an operand fragment, see ldmatrixPairDim) from `tile`.
std::vector<llvm::Value*> readWithLdmatrix(LoweringContext& ctx, const LinearLayout& to, const SwizzledTile& tile,
                                           int pairDim, llvm::Type* elementType, llvm::Value* base) {
  llvm::IRBuilder<>& b = ctx.b;
  const bool transposed = pairDim != tile.contigDim;
  // Each 8×8 matrix covers two registers (bit 0) of every lane; up to four
  // matrices per instruction take the next register bits, lanes 8i..8i+7 giving
  // matrix i's eight row addresses.
  const int64_t groups = to.numRegisters() / 2;
  const int matricesLog2 = static_cast<int>(std::min<size_t>(2, to.reg.size() - 1));
  const int64_t matrices = int64_t{1} << matricesLog2;
  ATTNJIT_CHECK(groups % matrices == 0, "codegen: ldmatrix grouping");
  // The coordinate whose row lane l addresses, as a layout: lane bits 0-2 walk the
  // matrix's rows (along the non-contiguous dimension), bits 3-4 select the
  // matrix (the destination's register bits 1-2), warps as in the destination,
  // and the remaining register bits enumerate the instructions.
  const int rowDim = 1 - tile.contigDim;
  LinearLayout rows;
  rows.shape = to.shape;
  rows.lane = {unitCoord(rowDim, 1), unitCoord(rowDim, 2), unitCoord(rowDim, 4), Coord{0, 0, 0}, Coord{0, 0, 0}};
  for (int i = 0; i < matricesLog2; ++i) rows.lane[3 + static_cast<size_t>(i)] = to.reg[1 + static_cast<size_t>(i)];
  rows.warp = to.warp;
  rows.reg.assign(to.reg.begin() + 1 + matricesLog2, to.reg.end());

  llvm::Intrinsic::ID id;
  if (matrices == 4)
    id = transposed ? llvm::Intrinsic::nvvm_ldmatrix_sync_aligned_m8n8_x4_trans_b16
                    : llvm::Intrinsic::nvvm_ldmatrix_sync_aligned_m8n8_x4_b16;
  else if (matrices == 2)
    id = transposed ? llvm::Intrinsic::nvvm_ldmatrix_sync_aligned_m8n8_x2_trans_b16
                    : llvm::Intrinsic::nvvm_ldmatrix_sync_aligned_m8n8_x2_b16;
  else
    id = transposed ? llvm::Intrinsic::nvvm_ldmatrix_sync_aligned_m8n8_x1_trans_b16
                    : llvm::Intrinsic::nvvm_ldmatrix_sync_aligned_m8n8_x1_b16;

  auto* pair = llvm::FixedVectorType::get(elementType, 2);
  std::vector<llvm::Value*> out(static_cast<size_t>(to.numRegisters()));
  SwizzledOffsets offsets(ctx, rows, tile);
  for (int64_t instr = 0; instr < rows.numRegisters(); ++instr) {
    llvm::Value* address = offsets.address(base, elementType, instr);
    llvm::Value* loaded = b.CreateIntrinsic(id, {address->getType()}, {address});
    for (int64_t m = 0; m < matrices; ++m) {
      llvm::Value* word = matrices == 1 ? loaded : b.CreateExtractValue(loaded, static_cast<unsigned>(m));
      llvm::Value* halves = b.CreateBitCast(word, pair);
      size_t first = static_cast<size_t>((instr * matrices + m) * 2);
      out[first] = b.CreateExtractElement(halves, uint64_t{0});
      out[first + 1] = b.CreateExtractElement(halves, uint64_t{1});
    }
  }
  return out;
}

std::vector<llvm::Value*> readVectors(LoweringContext& ctx, const LinearLayout& to, const SwizzledTile& tile,
                                      llvm::Type* elementType, int64_t elemBytes, llvm::Value* base) {
  llvm::IRBuilder<>& b = ctx.b;
  const int64_t vec = vectorWidth(to, tile.contigDim, tile.chunkElements);
  auto* vectorType = llvm::FixedVectorType::get(elementType, static_cast<unsigned>(vec));
  std::vector<llvm::Value*> out(static_cast<size_t>(to.numRegisters()));
  SwizzledOffsets offsets(ctx, to, tile);
  for (int64_t r = 0; r < to.numRegisters(); r += vec) {
    llvm::Value* address = offsets.address(base, elementType, r);
    if (vec == 1) {
      out[static_cast<size_t>(r)] = b.CreateAlignedLoad(elementType, address, llvm::Align(elemBytes));
      continue;
    }
    llvm::Value* v = b.CreateAlignedLoad(vectorType, address, llvm::Align(vec * elemBytes));
    for (int64_t i = 0; i < vec; ++i) out[static_cast<size_t>(r + i)] = b.CreateExtractElement(v, uint64_t(i));
  }
  return out;
}

}  // namespace

SwizzledOffsets::SwizzledOffsets(LoweringContext& ctx, const LinearLayout& layout, const SwizzledTile& tile)
    : ctx_(ctx), layout_(layout), tile_(tile) {
  const int rowDim = 1 - tile.contigDim;
  thread_ = swizzledOffset(ctx.b, tile, ctx.coordinate(layout, 0, rowDim), ctx.coordinate(layout, 0, tile.contigDim));
  for (const std::vector<Coord>* bases : {&layout.lane, &layout.warp})
    for (const Coord& basis : *bases) threadBits_ |= tile.offsetOf(basis[static_cast<size_t>(rowDim)],
                                                                   basis[static_cast<size_t>(tile.contigDim)]);
}

llvm::Value* SwizzledOffsets::address(llvm::Value* base, llvm::Type* elementType, int64_t reg) {
  const Coord coord = layout_.registerCoord(static_cast<uint64_t>(reg));
  const int64_t constant =
      tile_.offsetOf(coord[static_cast<size_t>(1 - tile_.contigDim)], coord[static_cast<size_t>(tile_.contigDim)]);
  const int64_t xored = constant & threadBits_;
  const int64_t added = constant & ~threadBits_;
  llvm::Value* offset = thread_;
  if (xored != 0) {
    auto found = std::find_if(xored_.begin(), xored_.end(), [&](const auto& entry) { return entry.first == xored; });
    if (found == xored_.end()) found = xored_.insert(xored_.end(), {xored, ctx_.b.CreateXor(thread_, ctx_.i32(xored))});
    offset = found->second;
  }
  llvm::Value* address = elementAddress(ctx_, base, elementType, offset);
  return added == 0 ? address : elementAddress(ctx_, address, elementType, ctx_.i32(added));
}

std::optional<SwizzledTile> swizzledTileFor(const LinearLayout& from, const LinearLayout& to, int64_t elemBytes) {
  if (from.rank() != 2 || from.shape != to.shape) return std::nullopt;
  if (elemBytes > kSwizzleChunkBytes || kSwizzleChunkBytes % elemBytes != 0) return std::nullopt;
  // Contiguous in shared memory: the dimension of the source's longest per-thread run.
  int contigDim = contiguousRegisters(from, 0) > contiguousRegisters(from, 1) ? 0 : 1;
  if (contiguousRegisters(from, contigDim) == 1) {
    // No run in the source: let the destination's runs decide (vector reads).
    contigDim = contiguousRegisters(to, 0) > contiguousRegisters(to, 1) ? 0 : 1;
  }
  const int64_t rowElements = from.shape[static_cast<size_t>(contigDim)];
  if (rowElements * elemBytes < kSwizzleChunkBytes) return std::nullopt;
  return SwizzledTile(contigDim, rowElements, elemBytes);
}

llvm::Value* swizzledOffset(llvm::IRBuilder<>& b, const SwizzledTile& tile, llvm::Value* row, llvm::Value* col) {
  llvm::Value* chunk = b.CreateLShr(col, static_cast<uint64_t>(ir::log2Exact(tile.chunkElements)));
  llvm::Value* within = b.CreateAnd(col, static_cast<uint64_t>(tile.chunkElements - 1));
  llvm::Value* phase = b.CreateAnd(b.CreateLShr(row, static_cast<uint64_t>(ir::log2Exact(tile.perPhase))),
                                   static_cast<uint64_t>(tile.maxPhase - 1));
  if (tile.blockRows > 0) {
    // chunk = (block, chunk within the block's 8); phase = row % 8 (perPhase 1).
    llvm::Value* block = b.CreateLShr(chunk, uint64_t{3});
    llvm::Value* swizzled = b.CreateShl(b.CreateXor(b.CreateAnd(chunk, uint64_t{7}), phase),
                                        static_cast<uint64_t>(ir::log2Exact(tile.chunkElements)));
    llvm::Value* rowStart = b.CreateShl(row, static_cast<uint64_t>(ir::log2Exact(tile.blockElements())));
    llvm::Value* blockStart =
        b.CreateShl(block, static_cast<uint64_t>(ir::log2Exact(tile.blockRows * tile.blockElements())));
    return b.CreateOr(b.CreateOr(blockStart, rowStart), b.CreateOr(swizzled, within));
  }
  llvm::Value* swizzled =
      b.CreateShl(b.CreateXor(chunk, phase), static_cast<uint64_t>(ir::log2Exact(tile.chunkElements)));
  llvm::Value* rowStart = b.CreateShl(row, static_cast<uint64_t>(ir::log2Exact(tile.rowElements)));
  return b.CreateOr(rowStart, b.CreateOr(swizzled, within));
}

std::vector<llvm::Value*> readSwizzledTile(LoweringContext& ctx, const LinearLayout& to, const SwizzledTile& tile,
                                           llvm::Type* elementType, llvm::Value* base) {
  int pairDim = tile.elemBytes == 2 && ctx.target.hasMmaSync ? ldmatrixPairDim(to) : -1;
  if (pairDim >= 0 && ldmatrixRowsAligned(to, pairDim, tile.contigDim))
    return readWithLdmatrix(ctx, to, tile, pairDim, elementType, base);
  return readVectors(ctx, to, tile, elementType, tile.elemBytes, base);
}

int64_t swizzleVectorWidth(const LinearLayout& layout, const SwizzledTile& tile) {
  return vectorWidth(layout, tile.contigDim, tile.chunkElements);
}

void storeSwizzledTile(LoweringContext& ctx, const std::vector<llvm::Value*>& regs, const LinearLayout& from,
                       const SwizzledTile& tile, llvm::Type* elementType, llvm::Value* base) {
  llvm::IRBuilder<>& b = ctx.b;
  const int64_t elemBytes = tile.elemBytes;
  const int64_t vec = vectorWidth(from, tile.contigDim, tile.chunkElements);
  auto* vectorType = llvm::FixedVectorType::get(elementType, static_cast<unsigned>(vec));
  SwizzledOffsets offsets(ctx, from, tile);
  for (int64_t r = 0; r < from.numRegisters(); r += vec) {
    llvm::Value* address = offsets.address(base, elementType, r);
    if (vec == 1) {
      b.CreateAlignedStore(regs[static_cast<size_t>(r)], address, llvm::Align(elemBytes));
      continue;
    }
    llvm::Value* v = llvm::PoisonValue::get(vectorType);
    for (int64_t i = 0; i < vec; ++i) v = b.CreateInsertElement(v, regs[static_cast<size_t>(r + i)], uint64_t(i));
    b.CreateAlignedStore(v, address, llvm::Align(vec * elemBytes));
  }
}

std::optional<std::vector<llvm::Value*>> convertThroughSwizzledShared(LoweringContext& ctx,
                                                                     const std::vector<llvm::Value*>& regs,
                                                                     const LinearLayout& from, const LinearLayout& to,
                                                                     llvm::Type* elementType) {
  if (elementType->isIntegerTy(1)) return std::nullopt;
  const int64_t elemBytes = static_cast<int64_t>(ctx.module.getDataLayout().getTypeAllocSize(elementType));
  const std::optional<SwizzledTile> planned = swizzledTileFor(from, to, elemBytes);
  if (!planned) return std::nullopt;
  const SwizzledTile& tile = *planned;
  llvm::Value* base = ctx.sharedBase();
  ctx.reserveShared(tile.bytes(from));
  ctx.barrier();
  storeSwizzledTile(ctx, regs, from, tile, elementType, base);
  ctx.barrier();
  return readSwizzledTile(ctx, to, tile, elementType, base);
}

std::vector<llvm::Value*> readSwizzledTileToSink(LoweringContext& ctx, const LinearLayout& to,
                                                 const SwizzledTile& tile, llvm::Type* elementType,
                                                 llvm::Value* base, const SharedRegion& region) {
  AppendedInstructions reads(ctx.b);
  std::vector<llvm::Value*> regs = readSwizzledTile(ctx, to, tile, elementType, base);
  reads.forEach([](llvm::Instruction& inst) {
    if (llvm::isa<llvm::LoadInst, llvm::CallInst>(inst)) tagSlotRead(inst);
  });
  tagSharedAccesses(reads, region, SharedAccess::Read);
  return regs;
}

void storeSwizzledTileToRegion(LoweringContext& ctx, const std::vector<llvm::Value*>& regs, const LinearLayout& from,
                               const SwizzledTile& tile, llvm::Type* elementType, llvm::Value* base,
                               const SharedRegion& region) {
  AppendedInstructions stores(ctx.b);
  storeSwizzledTile(ctx, regs, from, tile, elementType, base);
  tagSharedAccesses(stores, region, SharedAccess::Write);
}

}  // namespace attnjit::codegen
