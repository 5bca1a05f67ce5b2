// The tilings the paged-attention and MLA decode ops pick, assembled by ptxas for sm_90a.
// A tiling whose hot loop spills registers to local memory runs at a fraction
// of its neighbours' speed: MQA at D=256 over quantized caches spilled 410-490
// bytes a thread at 64-key tiles (1.28-1.50x slower than the spill-free 32-key
// tiles), f32 prefill at D=192 and 256 spilled 3.7-5.6 KB (3.5-5.1x slower).
// Small spills are not worth a slower tiling: the op's 64-key prefill tiles at
// D=256 spill 232 bytes and beat the spill-free 32-key tiles by 12%, TF32
// decode at D=192 spills 52 and runs at 94% of the copy rate (docs/perf-log.md,
// 2026-12-02 and 2026-12-06). So every choice of the op's rules must stay
// within a budget of 256 bytes, the MLA decode op's for 16-bit and fp8
// latents too. Exact f32 (FMA dots, whole operand rows per thread) spills at
// every tiling above D=128 and is left out, and so is f32 MLA, whose 128-head
// tiling spills 320 bytes and runs 2.1x faster than the one that does not
// (1.526 against 3.257 ms, compiler/ops/MlaDecodeOp.cpp).
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "compiler/driver/CompileDriver.h"
#include "compiler/kernels/KvCacheFormat.h"
#include "compiler/kernels/MlaDecode.h"
#include "compiler/kernels/UnifiedAttention.h"
#include "compiler/ops/MlaDecodeOp.h"
#include "compiler/ops/PagedAttentionOp.h"
#include "runtime/Module.h"
#include "support/ParallelFor.h"
#include "tests/test_op_params.h"
#include "tests/test_tools.h"

using namespace attnjit;
using compiler::KvCacheFormat;
using ir::ScalarKind;

namespace {

struct TilingCase {
  std::string call;        // what the op was asked for
  std::string kernelName;  // what it picked
  std::function<support::Expected<std::unique_ptr<ir::Kernel>>()> build;
};

TilingCase pagedAttentionCase(std::string call, const compiler::UnifiedAttentionConfig& config) {
  return {std::move(call), config.kernelName(), [config] { return compiler::buildUnifiedAttention(config); }};
}

ops::PagedAttentionParams callOf(ScalarKind dtype, int headSize, int queryHeads, int kvHeads, KvCacheFormat format,
                                 bool decode) {
  ops::PagedAttentionParams p = tests::validPagedAttentionParams();
  p.dtype = dtype;
  p.headSize = headSize;
  p.numQueryHeads = queryHeads;
  p.numKvHeads = kvHeads;
  p.kvCacheFormat = format;
  p.numSms = 132;
  if (decode) {
    p.numSeqs = 64;
    p.numTokens = 64;
    p.maxQueryLen = 1;
    p.maxSeqLen = p.minSeqLen = 4096;
  } else {
    p.numSeqs = 8;
    p.numTokens = 8 * 2048;
    p.maxQueryLen = 2048;
    p.maxSeqLen = p.minSeqLen = 2048;
  }
  return p;
}

// The spill bytes ptxas reports for `ptx`, compiled as the runtime's loader
// does (whole-program where warpgroup MMAs or setmaxnreg need it); -1 where
// the report has no spill line.
int spillStoreBytes(const std::string& ptx) {
  const std::string info =
      tests::ptxasInfo(ptx, "sm_90a", /*relocatable=*/!runtime::needsWholeProgramCompile(ptx));
  std::smatch match;
  static const std::regex spills(R"((\d+) bytes spill stores)");
  if (!std::regex_search(info, match, spills)) return -1;
  return std::stoi(match[1]);
}

// ptxas's spill stores a thread may make in a kernel the op picks (above).
constexpr int kSpillBudgetBytes = 256;

// Compiles each distinct kernel of `cases` (on 4 threads) and checks its
// spills against the budget (unless !enforce); `print` lists every kernel
// with its spill bytes.
void checkSpillBudget(const std::vector<TilingCase>& cases, bool print = false, bool enforce = true) {
  // One compile per distinct kernel; the calls that reach it are listed with it.
  std::map<std::string, std::vector<const TilingCase*>> byKernel;
  for (const TilingCase& c : cases) byKernel[c.kernelName].push_back(&c);
  std::vector<const TilingCase*> kernels;
  for (const auto& [name, calls] : byKernel) kernels.push_back(calls.front());
  std::vector<std::string> failures(kernels.size());
  support::parallelFor(static_cast<int>(kernels.size()), [&](int i) {
    const std::string& name = kernels[i]->kernelName;
    auto kernel = kernels[i]->build();
    if (!kernel) {
      failures[i] = name + ": " + kernel.diagnostic().str();
      return;
    }
    compiler::CompileOptions options;
    options.target = "sm_90a";
    auto compiled = compiler::compileKernel(**kernel, options);
    if (!compiled) {
      failures[i] = name + ": " + compiled.diagnostic().str();
      return;
    }
    const int spills = spillStoreBytes(compiled->ptx);
    if (spills < 0 || (enforce && spills > kSpillBudgetBytes))
      failures[i] = name + ": " + std::to_string(spills) + " bytes spill stores";
    if (print) std::printf("spills %s %d (%s)\n", name.c_str(), spills, kernels[i]->call.c_str());
  }, 4);
  for (size_t i = 0; i < kernels.size(); ++i) {
    INFO("the op's choice for " << kernels[i]->call << ": " << failures[i]);
    CHECK(failures[i].empty());
  }
}

std::vector<TilingCase> grid(const std::vector<ScalarKind>& dtypes, const std::vector<int>& headSizes,
                             const std::vector<std::pair<int, int>>& heads, const std::vector<KvCacheFormat>& formats,
                             bool decode) {
  std::vector<TilingCase> cases;
  for (ScalarKind dtype : dtypes)
    for (int d : headSizes)
      for (auto [hq, hkv] : heads)
        for (KvCacheFormat format : formats) {
          if (dtype == ScalarKind::F32 && format != KvCacheFormat::Auto) continue;
          const ops::PagedAttentionParams p = callOf(dtype, d, hq, hkv, format, decode);
          cases.push_back(pagedAttentionCase(std::string(decode ? "decode B=64 ctx 4096" : "prefill 8 x 2048") +
                                                 ", " + ir::scalarName(dtype) + " " + std::to_string(hq) + "/" +
                                                 std::to_string(hkv) + " D=" + std::to_string(d) + ", " +
                                                 compiler::kvCacheFormatName(format),
                                             ops::selectPagedAttentionVariant(p)));
        }
  return cases;
}

// MLA decode B=64 ctx 4096 over heads, latent widths and latent formats.
std::vector<TilingCase> mlaGrid(const std::vector<int>& headCounts, bool withF32) {
  std::vector<std::pair<ScalarKind, KvCacheFormat>> formats = {{ScalarKind::BF16, KvCacheFormat::Auto},
                                                               {ScalarKind::BF16, KvCacheFormat::Fp8E4M3}};
  if (withF32) formats.push_back({ScalarKind::F32, KvCacheFormat::Auto});
  std::vector<TilingCase> cases;
  for (int heads : headCounts)
    for (int rank : {512, 256})
      for (auto [dtype, format] : formats) {
        ops::MlaDecodeParams p;
        p.dtype = dtype;
        p.kvCacheFormat = format;
        p.kvLoraRank = rank;
        p.numHeads = heads;
        p.blockSize = 16;
        p.numSeqs = 64;
        p.maxSeqLen = 4096;
        p.numSms = 132;
        const compiler::MlaDecodeConfig config = ops::selectMlaDecodeVariant(p);
        cases.push_back({"MLA decode B=64 ctx 4096, " + std::string(ir::scalarName(dtype)) + " " +
                             std::to_string(heads) + " heads, width " + std::to_string(rank + 64) + ", " +
                             compiler::kvCacheFormatName(format),
                         config.kernelName(), [config] { return compiler::buildMlaDecode(config); }});
      }
  return cases;
}

const std::vector<KvCacheFormat> kAllFormats = {KvCacheFormat::Auto, KvCacheFormat::Fp8E4M3,
                                                KvCacheFormat::Int8PerTokenHead, KvCacheFormat::Fp8PerTokenHead,
                                                KvCacheFormat::Int4PerTokenHead};

}  // namespace

TEST_CASE("the op's tilings assemble for sm_90a within the spill budget", "[op][ptxas]") {
  if (!tests::havePtxas()) return tests::skipTest("ptxas is not on the PATH");
  // Where registers run short: wide heads, MQA's 32-row query tiles, f32.
  const std::vector<std::pair<int, int>> heads = {{32, 8}, {32, 1}};
  for (bool decode : {true, false})
    checkSpillBudget(grid({ScalarKind::BF16, ScalarKind::F32}, {128, 192, 256}, heads, kAllFormats, decode));
  checkSpillBudget(mlaGrid({64, 128}, /*withF32=*/false));
}

// A survey of a wider grid (240 kernels, a few minutes), each printed with its
// spills; it runs where ATTNJIT_SPILL_SURVEY is set.
TEST_CASE("the op's tilings over the whole grid assemble for sm_90a within the spill budget",
          "[op][ptxas][survey]") {
  if (std::getenv("ATTNJIT_SPILL_SURVEY") == nullptr)
    return tests::skipTest("the survey of the whole grid runs where ATTNJIT_SPILL_SURVEY is set");
  if (!tests::havePtxas()) return tests::skipTest("ptxas is not on the PATH");
  const std::vector<std::pair<int, int>> heads = {{8, 8}, {32, 8}, {128, 8}, {32, 1}};
  for (bool decode : {true, false})
    checkSpillBudget(grid({ScalarKind::BF16, ScalarKind::F16, ScalarKind::F32}, {64, 96, 128, 192, 256}, heads,
                          kAllFormats, decode),
                     /*print=*/true);
  // f32 MLA is printed, not held to the budget: at 128 heads its tiling
  // spills 320 bytes and is 2.1x faster than the one that does not.
  checkSpillBudget(mlaGrid({16, 32, 64, 128}, /*withF32=*/true), /*print=*/true, /*enforce=*/false);
}
