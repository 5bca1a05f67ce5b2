// searchSequence (compiler/kernels/SequenceSearch.h): the largest s in
// [0, num_seqs) whose start is at or before a target, in seq_search_steps =
// ceil(log2(num_seqs + 1)) steps. A scalar target (one search per program) and a
// tile of targets (one per row) must agree with a scan of the table for batch
// sizes on each side of the step count's boundaries, empty sequences (repeated
// starts) and targets past the last start included.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "compiler/kernels/SequenceSearch.h"
#include "ir/Builder.h"
#include "ir/Interpreter.h"
#include "ir/KernelAttributes.h"

using namespace attnjit;
using namespace attnjit::ir;

namespace {

constexpr int64_t kTileTargets = 16;

// Program p searches for target p (scalar) or for targets 16p .. 16p + 15 (a
// tile) and stores what it found at out[target].
std::unique_ptr<Kernel> searchKernel(bool tileTargets) {
  auto kernel = std::make_unique<Kernel>(tileTargets ? "search_tile" : "search_scalar");
  Value* starts = kernel->addParameter(Type::pointer(ScalarKind::I32), "starts");
  Value* out = kernel->addParameter(Type::pointer(ScalarKind::I32), "out");
  Value* numSeqs = kernel->addParameter(Type::scalar(ScalarKind::I32), "num_seqs");
  Value* steps = kernel->addParameter(Type::scalar(ScalarKind::I32), "seq_search_steps");
  setKernelAttribute(*kernel, KernelAttribute::NumWarps, 1);
  Builder b(*kernel);
  Value* program = b.programId(0, "program");
  Value* target = program;
  if (tileTargets)
    target = b.add(b.splat(b.mul(program, b.i32(kTileTargets)), {kTileTargets}), b.arange(0, kTileTargets), "targets");
  const compiler::SequenceSearch search{target, steps, numSeqs, b.i32(0), b.i32(1)};
  Value* found = compiler::searchSequence(
      b, search,
      [&](Value* mid, Value* searching) {
        if (!tileTargets) return b.load(b.addPtr(starts, mid), nullptr, nullptr, "mid_start");
        return b.load(b.addPtr(b.splat(starts, {kTileTargets}), mid), searching,
                      b.constInt(0, Type::tile({kTileTargets}, Type::scalar(ScalarKind::I32))), "mid_start");
      },
      "found");
  Value* at = tileTargets ? b.addPtr(b.splat(out, {kTileTargets}), target) : b.addPtr(out, target);
  b.store(at, found);
  REQUIRE(b.finish().isOk());
  return kernel;
}

// num_seqs + 1 non-decreasing starts from 0: lengths 0-3 with a few long ones.
std::vector<int32_t> randomStarts(int numSeqs, std::mt19937& rng) {
  std::vector<int32_t> starts{0};
  for (int s = 0; s < numSeqs; ++s) starts.push_back(starts.back() + static_cast<int32_t>(rng() % 4 == 0 ? 9 : rng() % 3));
  return starts;
}

int32_t scanned(const std::vector<int32_t>& starts, int numSeqs, int32_t target) {
  int32_t found = -1;
  for (int s = 0; s < numSeqs; ++s)
    if (starts[static_cast<size_t>(s)] <= target) found = s;
  return found;
}

}  // namespace

TEST_CASE("sequence search: scalar and tile targets find what a scan finds", "[sequence_search]") {
  std::mt19937 rng(5);
  for (bool tileTargets : {false, true}) {
    const auto kernel = searchKernel(tileTargets);
    for (int numSeqs : {1, 2, 7, 8, 15, 16, 17, 255, 256, 257, 1023, 4095, 4096}) {
      std::vector<int32_t> starts = randomStarts(numSeqs, rng);
      if (numSeqs == 16) starts.assign(17, 0);  // every sequence empty: all targets land on the last
      const int64_t targets = (starts.back() + 2 + kTileTargets) / kTileTargets * kTileTargets;
      std::vector<int32_t> out(static_cast<size_t>(targets), -777);
      InterpreterMemory memory;
      const uint64_t startsAddress = memory.map(starts.data(), starts.size() * sizeof(int32_t), "starts");
      const uint64_t outAddress = memory.map(out.data(), out.size() * sizeof(int32_t), "out");
      const int64_t steps = static_cast<int64_t>(std::ceil(std::log2(numSeqs + 1.0)));
      const LaunchGrid grid{tileTargets ? targets / kTileTargets : targets, 1, 1};
      const support::Status ran = interpretKernel(
          *kernel, grid, {PointerArg{startsAddress}, PointerArg{outAddress}, int64_t{numSeqs}, steps}, memory);
      INFO("tile targets " << tileTargets << ", num_seqs " << numSeqs << ": " << ran.message());
      REQUIRE(ran.isOk());
      int mismatches = 0;
      for (int32_t t = 0; t < targets; ++t)
        if (out[static_cast<size_t>(t)] != scanned(starts, numSeqs, t) && ++mismatches <= 3)
          FAIL_CHECK("target " << t << ": found " << out[static_cast<size_t>(t)] << ", the scan "
                               << scanned(starts, numSeqs, t));
      CHECK(mismatches == 0);
    }
  }
}
