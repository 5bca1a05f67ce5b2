// Loop-invariant mma operands kept in shared memory and read again at every use
// (codegen/lower/SharedOperands.cpp). Internal to codegen/.
#pragma once

#include <unordered_map>
#include <vector>

#include "codegen/lower/LoweringContext.h"
#include "codegen/lower/SwizzledShared.h"

namespace attnjit::codegen {

struct SharedOperand {
  SwizzledTile tile;
  ir::LinearLayout from;  // of the converted tile's registers
  ir::LinearLayout to;    // the operand layout its uses read
  int64_t offset = 0;     // bytes from the start of dynamic shared memory
  // Every use is a dot that can read it through a wgmma matrix descriptor
  // (codegen/lower/WarpgroupMma.h): stored in 128-byte column blocks, aligned.
  bool warpgroupOperand = false;
};

struct SharedOperandPlan {
  std::vector<SharedOperand> operands;
  std::unordered_map<const ir::Operation*, int> converts;  // planned convert_layout → its operand
};

// With kernel attribute shared_invariant_operands = 1: plans a buffer of its own,
// after the cp.async buffers (ctx.asyncBufferBytes grows by its bytes), for every
// convert_layout into a 16-bit mma operand layout that only dots inside a loop
// below it read. Sets ctx.sharedOperands when any is planned.
void planSharedOperands(LoweringContext& ctx);

// The plan in words, one line per operand (for --print-after=plan-shared-operands).
std::string describeSharedOperandPlan(const LoweringContext& ctx);

// Lowers a planned convert (stores its tile into the buffer) and returns true;
// false when `op` is not planned.
bool lowerSharedOperandConvert(LoweringContext& ctx, const ir::Operation& op);

// A shared operand's tile and the address of its buffer (for wgmma descriptors).
const SwizzledTile& sharedOperandTile(const LoweringContext& ctx, const Lowered& value);
llvm::Value* sharedOperandAddress(LoweringContext& ctx, const Lowered& value);

// Before `op`: each operand that lives in a shared buffer is read (ldmatrix) into
// registers for `op` alone. restore() gives the operands back their buffers, so
// later uses (the next iteration's dot) read again.
class SharedOperandReads {
 public:
  SharedOperandReads(LoweringContext& ctx, const ir::Operation& op);
  ~SharedOperandReads();
  SharedOperandReads(const SharedOperandReads&) = delete;
  SharedOperandReads& operator=(const SharedOperandReads&) = delete;

 private:
  LoweringContext& ctx_;
  std::vector<std::pair<const ir::Value*, Lowered>> saved_;
};

}  // namespace attnjit::codegen
