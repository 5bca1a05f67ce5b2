// cluster_reduce_max / cluster_reduce_sum: all-reduces across the CTAs of a
// thread-block cluster through distributed shared memory (sm_90 and newer).
//
// The programs of a cluster run the same code with the operand in the same
// layout, so thread t of every CTA holds the same elements in the same
// registers: the exchange is per thread and needs no layout. Each thread stores
// its registers in its own CTA's scratch area (register r of thread t at word
// 4·(c·threads + t) + r mod 4 for chunk c = r / 4: a warp's stores and loads are
// contiguous 16-byte vectors), the cluster meets at
// a barrier (arrive has release and wait acquire semantics at cluster scope, so
// the stores are visible), and every thread reads the same word of each CTA in
// rank order through `mapa` and `ld.shared::cluster`, combining as it goes:
// every CTA computes the same sums in the same order, so they agree bit for bit.
// A second cluster barrier keeps each CTA's area alive (no CTA exits or reuses
// its scratch) until the others have read it. The CTA barrier before the stores
// is the scratch area's usual guard against the reads of its previous use.
#include <llvm/IR/IntrinsicsNVPTX.h>

#include <algorithm>
#include <vector>

#include "codegen/lower/LoweringContext.h"
#include "ir/KernelAttributes.h"

namespace attnjit::codegen {

using namespace ir;

namespace {
// NVPTX's address space of another CTA's shared memory (`mapa` results).
constexpr unsigned kSharedClusterAddressSpace = 7;

void clusterBarrier(llvm::IRBuilder<>& b) {
  b.CreateIntrinsic(b.getVoidTy(), llvm::Intrinsic::nvvm_barrier_cluster_arrive, {});
  b.CreateIntrinsic(b.getVoidTy(), llvm::Intrinsic::nvvm_barrier_cluster_wait, {});
}
}  // namespace

void lowerClusterReduce(LoweringContext& ctx, const Operation& op) {
  llvm::IRBuilder<>& b = ctx.b;
  const Lowered& in = ctx.get(op.operand(0));
  const int clusterSize = static_cast<int>(kernelAttribute(ctx.kernel, KernelAttribute::ClusterSize));
  if (ctx.role != LoweringContext::Role::All) {
    // Every live thread of the cluster must reach a cluster barrier; producer
    // warps never come here. generatePtx lowers cluster kernels without them.
    ctx.unsupported(op, "in a kernel with producer warps");
    ctx.set(op.result(), in);
    return;
  }
  // Chunks of up to four registers: chunk c of thread t at 16-byte slot
  // c·threads + t, one vector store and one vector load per rank (a warp's
  // accesses are 512 contiguous bytes).
  const int64_t registers = static_cast<int64_t>(in.regs.size());
  const int threads = ctx.numThreads();
  const int64_t chunks = (registers + 3) / 4;
  // The scratch area starts after the kernel's own buffers, whose sizes need
  // not be multiples of 16 bytes (a small shared operand): the exchange starts
  // at the next 16-byte boundary (dynamic shared memory itself is aligned).
  const int64_t scratchOffset = ctx.asyncBufferBytes == 0 || ctx.buffersReleased ? 0 : ctx.asyncBufferBytes;
  const int64_t padding = (16 - scratchOffset % 16) % 16;
  ctx.reserveShared(padding + chunks * threads * 16);
  llvm::Type* f32 = b.getFloatTy();
  llvm::Value* base = b.CreateConstInBoundsGEP1_64(b.getInt8Ty(), ctx.sharedBase(), static_cast<uint64_t>(padding));
  struct Chunk {
    llvm::Value* address;
    int64_t first;
    unsigned width;
    llvm::Type* type;
    llvm::Align alignment;  // a chunk of 3 is 4-byte aligned only
  };
  std::vector<Chunk> plan;
  for (int64_t c = 0; c < chunks; ++c) {
    const auto width = static_cast<unsigned>(std::min<int64_t>(4, registers - 4 * c));
    llvm::Value* slot = b.CreateAdd(ctx.threadId, ctx.i32(c * threads));
    plan.push_back({b.CreateGEP(f32, base, b.CreateShl(slot, 2)), 4 * c, width,
                    width == 1 ? f32 : static_cast<llvm::Type*>(llvm::FixedVectorType::get(f32, width)),
                    llvm::Align(width == 3 ? 4 : 4 * width)});
  }
  ctx.barrier();
  for (const Chunk& chunk : plan) {
    llvm::Value* packed = chunk.width == 1 ? in.regs[static_cast<size_t>(chunk.first)]
                                           : llvm::PoisonValue::get(chunk.type);
    for (unsigned j = 0; chunk.width > 1 && j < chunk.width; ++j)
      packed = b.CreateInsertElement(packed, in.regs[static_cast<size_t>(chunk.first + j)], j);
    b.CreateAlignedStore(packed, chunk.address, chunk.alignment);
  }
  clusterBarrier(b);
  const bool isSum = op.opcode() == Opcode::ClusterReduceSum;
  llvm::Type* clusterPointer = llvm::PointerType::get(ctx.llvm, kSharedClusterAddressSpace);
  Lowered result{std::vector<llvm::Value*>(static_cast<size_t>(registers)), in.layout};
  for (const Chunk& chunk : plan) {
    std::vector<llvm::Value*> combined(chunk.width, nullptr);
    for (int rank = 0; rank < clusterSize; ++rank) {
      llvm::Value* remote = b.CreateIntrinsic(clusterPointer, llvm::Intrinsic::nvvm_mapa_shared_cluster,
                                              {chunk.address, ctx.i32(rank)});
      llvm::Value* loaded = b.CreateAlignedLoad(chunk.type, remote, chunk.alignment);
      for (unsigned j = 0; j < chunk.width; ++j) {
        llvm::Value* value = chunk.width == 1 ? loaded : b.CreateExtractElement(loaded, j);
        llvm::Value*& acc = combined[j];
        acc = !acc    ? value
              : isSum ? b.CreateFAdd(acc, value)
                      : b.CreateBinaryIntrinsic(llvm::Intrinsic::maximum, acc, value);
      }
    }
    for (unsigned j = 0; j < chunk.width; ++j) result.regs[static_cast<size_t>(chunk.first + j)] = combined[j];
  }
  clusterBarrier(b);
  ctx.set(op.result(), std::move(result));
}

}  // namespace attnjit::codegen
