// Counts of the PTX instructions that tell how a kernel uses the GPU: tensor cores
// (mma.sync, wgmma, ldmatrix), asynchronous copies, warp shuffles, barriers, global and shared
// memory traffic (and how much of the global loads is vectorized), exp2.
#pragma once

#include <string>

namespace attnjit::compiler::cli {

struct PtxInstructionMix {
  int mma = 0;             // mma.sync
  int wgmma = 0;           // wgmma.mma_async (warpgroup MMAs, sm_90a)
  int ldmatrix = 0;
  int cpAsync = 0;         // cp.async copies (not commit_group / wait_group / mbarrier.arrive, not TMA)
  int tma = 0;             // cp.async.bulk.tensor: TMA box copies (sm_90)
  int mbarrier = 0;        // mbarrier operations, cp.async.mbarrier.arrive included
  int shfl = 0;
  int barSync = 0;         // bar.sync and barrier.sync
  int ldGlobal = 0;
  int ldGlobalVector = 0;  // of ldGlobal: .v2, .v4 and .v8 loads
  int stGlobal = 0;
  int ldShared = 0;
  int stShared = 0;
  int ex2 = 0;
};

// Counts static instructions (each occurrence in the text once, loops not
// unrolled). Comments, directives and labels are skipped; predicates ("@%p1") and
// several statements on one line (inline asm) are handled.
PtxInstructionMix countPtxInstructions(const std::string& ptx);

}  // namespace attnjit::compiler::cli
