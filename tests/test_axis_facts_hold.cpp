// The axis facts (ir/AxisInfo.h) checked against the values the interpreter
// computes. Codegen trusts them for correctness, not only speed: 16-byte
// vector accesses need contiguous, aligned pointers and take one predicate
// for their elements (the mask's constancy), and registers with provably
// equal pointers share one load (equalValueRegisterBits). A fact that does
// not hold would give wrong results on the GPU only, so every integer and
// pointer tile of the shipped kernels is checked here, as the passes leave
// it (what codegen sees) and as built.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "compiler/kernels/MlaDecode.h"
#include "compiler/kernels/UnifiedAttention.h"
#include "compiler/spec/Spec.h"
#include "compiler/validation/AttentionProblem.h"
#include "compiler/validation/MlaDecodeProblem.h"
#include "compiler/validation/VariantRuns.h"
#include "ir/AxisInfo.h"
#include "ir/Interpreter.h"
#include "ir/InterpreterValue.h"
#include "ir/Parser.h"
#include "tests/test_attention_checks.h"
#include "tests/test_paths.h"
#include "tests/test_tools.h"

namespace attnjit {
namespace {

using ir::AxisFacts;
using ir::ElementClass;

// Checks every integer and pointer tile against its facts, per dimension d of
// a fact's value c, in aligned chunks of c elements along d (the other
// coordinates fixed):
//   constancy    every element equals the chunk's first
//   contiguity   the k-th element is the first plus k (pointers: k elements)
//   divisibility the first element of each contiguity chunk is a multiple
//                (pointers: in bytes; i1 masks: not checked)
class AxisFactsChecker final : public ir::InterpreterObserver {
 public:
  void kernelStarts(const ir::Kernel& kernel) override {
    std::lock_guard<std::mutex> lock(mutex_);
    axis_ = std::make_unique<ir::AxisInfo>(kernel);
    kernelName_ = kernel.name();
  }

  void valueComputed(const ir::Operation& op, size_t result, const ir::RuntimeValue& value) override {
    const ir::Value* v = op.results()[result].get();
    const ir::Type& type = v->type();
    if (!type.isTile()) return;
    const ElementClass cls = ir::elementClass(type);
    if (cls == ElementClass::Float) return;
    std::lock_guard<std::mutex> lock(mutex_);
    const AxisFacts& facts = axis_->facts(v);
    const std::vector<int64_t>& shape = type.shape();
    if (facts.constancy.size() != shape.size()) return;
    ++checkedValues_;
    const bool pointer = cls == ElementClass::Pointer;
    const bool boolean = !pointer && type.scalarKind() == ir::ScalarKind::I1;
    auto element = [&](size_t e) -> int64_t {
      return pointer ? static_cast<int64_t>(value.addresses[e]) : value.ints[e];
    };
    // Pointer elements step by their pointee's bytes (i4: by nibbles, one).
    const int64_t step = pointer && !ir::addressesNibbles(type.scalarKind()) ? ir::storageBits(type.scalarKind()) / 8 : 1;
    const size_t count = pointer ? value.addresses.size() : value.ints.size();
    int64_t stride = 1;
    for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
      const int64_t extent = shape[static_cast<size_t>(d)];
      const int64_t constancy = facts.constancy[static_cast<size_t>(d)];
      const int64_t contiguity = facts.contiguity[static_cast<size_t>(d)];
      const int64_t divisibility = facts.divisibility[static_cast<size_t>(d)];
      const bool claims = constancy > 1 || (!boolean && (contiguity > 1 || divisibility > 1));
      for (size_t e = 0; claims && e < count; ++e) {
        const int64_t i = (static_cast<int64_t>(e) / stride) % extent;
        if (constancy > 1) {
          const size_t first = e - static_cast<size_t>((i % constancy) * stride);
          if (element(e) != element(first)) fail(op, d, "constancy", constancy, e, element(e), element(first));
        }
        if (boolean) continue;
        if (contiguity > 1) {
          const int64_t offset = i % contiguity;
          const size_t first = e - static_cast<size_t>(offset * stride);
          if (element(e) != element(first) + offset * step)
            fail(op, d, "contiguity", contiguity, e, element(e), element(first));
        }
        if (divisibility > 1 && i % contiguity == 0 && element(e) % divisibility != 0)
          fail(op, d, "divisibility", divisibility, e, element(e), 0);
      }
      stride *= extent;
    }
  }

  int64_t checkedValues() const { return checkedValues_; }
  int64_t failures() const { return failures_; }
  const std::string& firstFailure() const { return firstFailure_; }

 private:
  void fail(const ir::Operation& op, int dim, const char* fact, int64_t claimed, size_t e, int64_t got,
            int64_t first) {
    if (failures_++ > 0) return;
    std::ostringstream text;
    text << kernelName_ << ": " << op.name() << " at " << op.location().line << ":" << op.location().col << " claims "
         << fact << " " << claimed << " along dim " << dim << "; element " << e << " is " << got
         << " (its chunk's first: " << first << ")";
    firstFailure_ = text.str();
  }

  std::mutex mutex_;
  std::unique_ptr<ir::AxisInfo> axis_;
  std::string kernelName_;
  int64_t checkedValues_ = 0, failures_ = 0;
  std::string firstFailure_;
};

void checkFactsHold(const AxisFactsChecker& checker) {
  INFO(checker.firstFailure());
  CHECK(checker.failures() == 0);
  CHECK(checker.checkedValues() > 0);
}

compiler::BatchShape mixedBatch() {
  compiler::BatchShape shape;
  shape.queryLens = {1, 37, 70, 1};
  shape.contextLens = {300, 20, 0, 17};
  shape.seed = 7;
  shape.checkStride = 7;
  return shape;
}

}  // namespace

TEST_CASE("axis facts hold on every integer and pointer tile of unified attention, after the passes",
          "[axis][interpreter]") {
  std::vector<compiler::UnifiedAttentionConfig> configs(1);  // the default decode-shaped tiling
  configs.push_back(tests::hopperPrefillTiling());
  configs.push_back(tests::hopperPrefillTiling());
  configs.back().warpSpecialize = true;
  configs.back().tileSize = 128;
  configs.back().qInShared = true;
  configs.back().causal = false;
  for (compiler::KvCacheFormat format :
       {compiler::KvCacheFormat::Fp8E4M3, compiler::KvCacheFormat::Int8PerTokenHead,
        compiler::KvCacheFormat::Int4PerTokenHead}) {
    configs.emplace_back();
    configs.back().kvCacheFormat = format;
  }
  configs.emplace_back();  // DiffKV over vLLM's packed cache
  configs.back().headSize = 192;
  configs.back().valueHeadSize = 128;
  configs.emplace_back();  // masks: window, chunks, block 32
  configs.back().slidingWindow = 40;
  configs.back().attentionChunkSize = 64;
  configs.back().blockSize = 32;
  configs.emplace_back();
  configs.back().splitKv = true;
  for (const compiler::UnifiedAttentionConfig& config : configs)
    for (bool wgmmaTarget : {false, true}) {
      INFO(config.kernelName() << (wgmmaTarget ? " (sm_90a passes)" : ""));
      AxisFactsChecker checker;
      ir::InterpreterObserverScope scope(checker);
      auto run = validation::runUnifiedAttentionInterpreted(config, mixedBatch(), /*afterPasses=*/true, wgmmaTarget);
      REQUIRE(run.isOk());
      CHECK(run->passed);
      checkFactsHold(checker);
    }
}

TEST_CASE("axis facts hold on every integer and pointer tile of MLA decode, after the passes", "[axis][interpreter]") {
  compiler::MlaDecodeConfig config;
  config.numHeads = 16;
  validation::MlaDecodeBatch batch;
  batch.seqLens = {1, 17, 90};
  AxisFactsChecker checker;
  ir::InterpreterObserverScope scope(checker);
  auto run = validation::runMlaDecodeInterpreted(config, batch, /*afterPasses=*/true);
  REQUIRE(run.isOk());
  CHECK(run->passed);
  checkFactsHold(checker);
}

TEST_CASE("axis facts hold on every integer and pointer tile of every shipped spec's kernels", "[axis][interpreter]") {
  int variants = 0;
  for (const auto& entry : std::filesystem::directory_iterator(tests::sourceDir() + "/specs")) {
    if (entry.path().extension() != ".yaml") continue;
    auto spec = compiler::loadSpecFile(entry.path().string());
    REQUIRE(spec.isOk());
    for (const compiler::Variant& variant : spec->variants) {
      INFO(variant.name);
      AxisFactsChecker checker;
      ir::InterpreterObserverScope scope(checker);
      auto run = validation::runVariantInterpreted(variant, spec->shape);
      REQUIRE(run.isOk());
      CHECK(run->passed);
      checkFactsHold(checker);
      ++variants;
    }
  }
  CHECK(variants >= 100);
}

// The example's rows start at (4 pid + r) * stride with no promise on stride:
// an odd stride is where a divisibility claim of 4 along the rows (which
// expand_dims once made, vectorizing the row loads) breaks.
TEST_CASE("axis facts hold on the row_softmax example with an odd row stride", "[axis][interpreter]") {
  auto module = ir::parseModule(tests::readFile(tests::sourceDir() + "/examples/tir/row_softmax.tir"),
                                "row_softmax.tir");
  REQUIRE(module.isOk());
  const ir::Kernel& kernel = *(*module)->kernels().front();
  const int rows = 9, columns = 100, stride = 131;
  std::vector<float> in(static_cast<size_t>(rows * stride)), out(in.size(), -1.0f);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>((i * 37) % 23) * 0.25f - 2.0f;
  ir::InterpreterMemory memory;
  const uint64_t inAddress = memory.map(in.data(), in.size() * sizeof(float), "in");
  const uint64_t outAddress = memory.map(out.data(), out.size() * sizeof(float), "out");
  AxisFactsChecker checker;
  ir::InterpreterObserverScope scope(checker);
  const support::Status status =
      ir::interpretKernel(kernel, {(rows + 3) / 4, 1, 1},
                          {ir::PointerArg{inAddress}, ir::PointerArg{outAddress}, int64_t{rows}, int64_t{columns},
                           int64_t{stride}},
                          memory);
  INFO(status.message());
  REQUIRE(status.isOk());
  checkFactsHold(checker);
  for (int r = 0; r < rows; ++r) {
    double maximum = -INFINITY, sum = 0;
    for (int c = 0; c < columns; ++c) maximum = std::max(maximum, static_cast<double>(in[r * stride + c]));
    for (int c = 0; c < columns; ++c) sum += std::exp(in[r * stride + c] - maximum);
    for (int c = 0; c < columns; ++c)
      CHECK(std::abs(out[r * stride + c] - std::exp(in[r * stride + c] - maximum) / sum) < 1e-6);
  }
}

}  // namespace attnjit
