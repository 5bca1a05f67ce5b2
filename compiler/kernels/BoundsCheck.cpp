#include "compiler/kernels/BoundsCheck.h"

namespace attnjit::compiler {

std::string describeBoundsViolation(const int32_t (&record)[kBoundsRecordInts], const BoundsCheckContext& context) {
  const auto code = static_cast<BoundsViolation>(record[0]);
  if (code == BoundsViolation::None) return {};
  const std::string sequence = std::to_string(record[1]), index = std::to_string(record[2]),
                    value = std::to_string(record[3]);
  const std::string prefix = context.op + ": bounds check failed: ";
  switch (code) {
    case BoundsViolation::None:
      return {};
    case BoundsViolation::QueryOffsetOutOfRange:
      if (record[2] == 0) return prefix + "cu_seqlens_q[0] = " + value + " must be 0";
      return prefix + "cu_seqlens_q[" + index + "] = " + value + " is outside [0, num_tokens " +
             std::to_string(context.numTokens) + "]";
    case BoundsViolation::QueryOffsetsDecreasing:
      return prefix + "cu_seqlens_q[" + index + "] = " + value + " is less than cu_seqlens_q[" +
             std::to_string(record[2] - 1) + "] (sequence " + sequence + " would have a negative query length)";
    case BoundsViolation::SeqLenBelowQueryLen:
      return prefix + "seq_lens[" + index + "] = " + value +
             " is less than the sequence's query length (cu_seqlens_q[" + std::to_string(record[2] + 1) +
             "] - cu_seqlens_q[" + index + "])";
    case BoundsViolation::SeqLenBeyondBlockTable:
      return prefix + "seq_lens[" + index + "] = " + value + " exceeds block_table_stride " +
             std::to_string(context.blockTableStride) + " x block_size " + std::to_string(context.blockSize);
    case BoundsViolation::BlockTableEntry:
      return prefix + "block_tables[" + sequence + "][" + index + "] = " + value + " is outside the cache's " +
             std::to_string(context.numBlocks) + " blocks (sequence " + sequence + ")";
    case BoundsViolation::SlotMapping:
      return prefix + "slot_mapping[" + index + "] = " + value + " is outside the cache's " +
             std::to_string(context.numBlocks * context.blockSize) + " slots (" + std::to_string(context.numBlocks) +
             " blocks x block_size " + std::to_string(context.blockSize) + "; -1 marks a padding token)";
  }
  return prefix + "unknown violation code " + std::to_string(record[0]) + " (sequence " + sequence + ", index " +
         index + ", value " + value + ")";
}

}  // namespace attnjit::compiler
