#include "compiler/validation/ConvertCacheProblem.h"

#include <cmath>
#include <numeric>
#include <sstream>

#include "compiler/validation/ProblemData.h"
#include "compiler/validation/reference/CompanionReference.h"

namespace attnjit::validation {

using ir::ScalarKind;
using namespace problem_data;

struct ConvertCacheProblem::Data {
  compiler::ConvertCacheConfig config;
  std::vector<double> source;  // the source elements' values
};

support::Expected<std::unique_ptr<ConvertCacheProblem>> ConvertCacheProblem::create(
    const compiler::ConvertCacheConfig& config, const compiler::BatchShape& shape) {
  if (support::Status s = config.validate(); !s) return s;
  if (support::Status s = shape.validate(); !s) return s;
  auto data = std::make_shared<Data>();
  data->config = config;
  const ScalarKind srcKind = config.srcElement(), dstKind = config.dstElement();
  const int64_t keys = std::accumulate(shape.queryLens.begin(), shape.queryLens.end(), int64_t{0}) +
                       std::accumulate(shape.contextLens.begin(), shape.contextLens.end(), int64_t{0});
  const int64_t n = elementsFor(keys, config.countDivisibility);
  RandomStream random(shape.seed);
  std::vector<uint8_t> source = poisonedBuffer(srcKind, static_cast<size_t>(n));
  data->source.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    double value = 0;
    if (config.toFp8) {
      value = ir::roundToFloatKind(std::ldexp(random.uniform(-1, 1), static_cast<int>(random.below(9)) - 4), srcKind);
    } else {
      // A random finite byte (fp8 NaNs excluded: e4m3's S.1111.111, e5m2's exponent 31).
      uint32_t bits = 0;
      do {
        bits = static_cast<uint32_t>(random.below(256));
      } while (srcKind == ScalarKind::F8E4M3 ? (bits & 0x7F) == 0x7F : (bits & 0x7C) == 0x7C);
      value = ir::decodeFloat(bits, srcKind);
    }
    data->source[static_cast<size_t>(i)] = value;
    setFloat(source, srcKind, static_cast<size_t>(i), value);
  }

  std::unique_ptr<ConvertCacheProblem> problem(new ConvertCacheProblem());
  problem->buffers_.push_back({"src", std::move(source), false});
  problem->buffers_.push_back({"dst", poisonedBuffer(dstKind, static_cast<size_t>(n + kPadding)), true});
  problem->scalars_ = {static_cast<double>(kScale), n};
  problem->grid_ = {compiler::convertCacheGridX(config, n), 1, 1};
  problem->minimumBytes_ = static_cast<double>(n) * static_cast<double>(elementBytes(srcKind) + elementBytes(dstKind));
  problem->data_ = std::move(data);
  return problem;
}

void ConvertCacheProblem::check(const std::vector<Buffer>& after, AttentionRunResult& result) const {
  const Data& data = *data_;
  const compiler::ConvertCacheConfig& config = data.config;
  const ScalarKind dstKind = config.dstElement();
  const std::vector<uint8_t>& dst = after[1].bytes;
  const int64_t n = static_cast<int64_t>(data.source.size());
  result.maxAbsError = result.maxRelError = result.tolerance = 0;
  std::string failure;
  for (int64_t i = 0; i < n + kPadding && failure.empty(); ++i) {
    const uint32_t got = getBits(dst, dstKind, static_cast<size_t>(i));
    if (i >= n) {
      if (got != poisonBits(dstKind)) failure = "the kernel wrote element " + std::to_string(i) + ", past the last";
      continue;
    }
    const double exact =
        reference::referenceConvertFp8(data.source[static_cast<size_t>(i)], static_cast<double>(kScale), config.toFp8);
    const double want = ir::roundToFloatKind(ir::roundToFloatKind(exact, ScalarKind::F32), dstKind);
    if (got != ir::encodeFloat(want, dstKind)) {
      std::ostringstream text;
      text << "element " << i << " (source " << data.source[static_cast<size_t>(i)] << "): got "
           << getFloat(dst, dstKind, static_cast<size_t>(i)) << ", expected " << want;
      failure = text.str();
      result.maxAbsError = std::abs(getFloat(dst, dstKind, static_cast<size_t>(i)) - want);
    }
  }
  result.detail = failure.empty() ? "every element bit for bit" : failure;
  result.passed = failure.empty();
}

support::Expected<AttentionRunResult> runConvertCacheInterpreted(const compiler::ConvertCacheConfig& config,
                                                                const compiler::BatchShape& shape) {
  auto problem = ConvertCacheProblem::create(config, shape);
  if (!problem) return problem.status();
  return runProblemInterpreted([&] { return compiler::buildConvertCache(config); }, **problem);
}

support::Expected<GpuRunResult> runConvertCacheGpu(const compiler::ConvertCacheConfig& config,
                                                   const compiler::BatchShape& shape, const GpuRunOptions& options) {
  auto problem = ConvertCacheProblem::create(config, shape);
  if (!problem) return problem.status();
  return runProblemGpu([&] { return compiler::buildConvertCache(config); }, **problem, options);
}

}  // namespace attnjit::validation
