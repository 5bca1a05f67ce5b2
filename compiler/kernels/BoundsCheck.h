// Bounds-checked kernels (a debugging mode): the record a checked kernel leaves
// behind and its text.
//
// A kernel compiled with checkBounds validates the indices it reads from device
// memory before using them (block-table entries, slot mappings, sequence lengths,
// query offsets). It never performs an out-of-range access: an invalid index is
// masked (an invalid block's keys are skipped, an invalid sequence is treated as
// empty, an invalid slot is not written). It records the violation in a small
// device buffer, bounds_record i32[kBoundsRecordInts] = [code, sequence, index,
// value], zeroed by the caller before the launch (code 0 = no violation).
//
// The record is written with plain stores: when several programs find violations
// in one launch, the fields of any one of them may win — and since each program
// writes its four fields one after another, the fields of two concurrent records
// may in principle interleave on a GPU (the interpreter runs programs one at a
// time). A non-zero code always means at least one violation happened; the message
// names one offending index, which is what a debugging run needs.
#pragma once

#include <cstdint>
#include <string>

namespace attnjit::compiler {

inline constexpr int kBoundsRecordInts = 4;

// The record's first field. Values are part of the kernels' interface: keep them.
enum class BoundsViolation : int32_t {
  None = 0,
  // cu_seqlens_q[index] = value is outside [0, num_tokens] (index 0: not 0).
  QueryOffsetOutOfRange = 1,
  // cu_seqlens_q[index] = value is less than cu_seqlens_q[index - 1].
  QueryOffsetsDecreasing = 2,
  // seq_lens[index] = value is less than the sequence's query length.
  SeqLenBelowQueryLen = 3,
  // seq_lens[index] = value exceeds block_table_stride · block_size.
  SeqLenBeyondBlockTable = 4,
  // block_tables[sequence][index] = value is outside [0, num_blocks).
  BlockTableEntry = 5,
  // slot_mapping[index] = value is neither -1 nor in [0, num_blocks · block_size).
  // The record holds the slot (an i64) saturated to the i32 range; the sequence is -1.
  SlotMapping = 6,
};

// What the message needs besides the record.
struct BoundsCheckContext {
  std::string op;                 // "paged attention", "reshape_and_cache": prefixes the message
  int64_t numBlocks = 0;          // cache blocks that exist
  int64_t blockSize = 0;          // tokens per block
  int64_t blockTableStride = 0;   // block-table entries per sequence (attention)
  int64_t numTokens = 0;          // query tokens (attention)
};

// "paged attention: bounds check failed: block_tables[3][17] = 9999 is outside the
// cache's 512 blocks (sequence 3)"; empty for a zero code.
std::string describeBoundsViolation(const int32_t (&record)[kBoundsRecordInts], const BoundsCheckContext& context);

}  // namespace attnjit::compiler
