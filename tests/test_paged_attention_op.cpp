// The op-level paged-attention API (compiler/PagedAttentionOp.h): argument
// validation and variant selection on the CPU; [gpu] launches on device buffers
// checked against the float64 reference through the attention harness.
#include <catch2/catch.hpp>

#include <numeric>
#include <string>

#include "tests/test_tools.h"
#include "compiler/AttentionProblem.h"
#include "compiler/PagedAttentionOp.h"
#include "runtime/DeviceBuffer.h"
#include "runtime/Driver.h"

using namespace attnjit;
using ir::ScalarKind;
using ir::Status;

namespace {

// A well-formed call (fake but aligned device addresses): bf16, 32/8 heads, D=128.
ops::PagedAttentionParams validParams() {
  ops::PagedAttentionParams p;
  p.dtype = ScalarKind::BF16;
  p.numQueryHeads = 32;
  p.numKvHeads = 8;
  p.headSize = 128;
  p.blockSize = 16;
  p.numSeqs = 4;
  p.numTokens = 4;
  p.maxQueryLen = 1;
  p.scale = 0.088f;
  p.out = 0x10000;
  p.q = 0x20000;
  p.kvCache = 0x30000;
  p.blockTables = 0x40000;
  p.seqLens = 0x50000;
  p.cuSeqlensQ = 0x60000;
  p.qStrideToken = p.oStrideToken = 32 * 128;
  p.qStrideHead = p.oStrideHead = 128;
  p.blockTableStride = 7;
  p.kvStrideBlock = 2 * 16 * 8 * 128;
  p.kvStrideKv = 16 * 8 * 128;
  p.kvStrideToken = 8 * 128;
  p.kvStrideHead = 128;
  return p;
}

std::string validationMessage(const ops::PagedAttentionParams& p) {
  Status s = ops::validatePagedAttention(p);
  return s ? std::string("ok") : s.diagnostic().message;
}

}  // namespace

TEST_CASE("paged attention op: arguments are validated before the GPU is touched", "[op]") {
  CHECK(validationMessage(validParams()) == "ok");
  auto p = validParams();
  p.kvCache = 0;
  CHECK(validationMessage(p) == "paged attention: kv_cache is a null pointer");
  p = validParams();
  p.q += 2;
  CHECK(validationMessage(p) == "paged attention: q (0x20002) is not 16-byte aligned, as the kernel is compiled to assume");
  p = validParams();
  p.numQueryHeads = 12;
  CHECK(validationMessage(p) == "paged attention: num_query_heads (12) is not a multiple of num_kv_heads (8)");
  p = validParams();
  p.kvStrideToken = 1028;
  CHECK(validationMessage(p) == "paged attention: kv_stride_token (1028) must be a multiple of 8 for head size 128");
  p = validParams();
  p.oStrideHead = 0;
  CHECK(validationMessage(p) == "paged attention: o_stride_head (0) must be positive");
  p = validParams();
  p.numTokens = 3;
  CHECK(validationMessage(p) ==
        "paged attention: num_tokens (3) is less than num_seqs (4): every sequence brings at least one query token");
  p = validParams();
  p.maxQueryLen = 9;
  CHECK(validationMessage(p) == "paged attention: max_query_len (9) must be between 1 and num_tokens (4)");
  p = validParams();
  p.scale = 0;
  CHECK(validationMessage(p).find("scale") != std::string::npos);
  p = validParams();
  p.headSize = 300;
  CHECK(validationMessage(p) == "paged attention: head_size (300) must be between 32 and 256");
  p = validParams();
  p.dtype = ScalarKind::I8;
  CHECK(validationMessage(p).find("dtype (i8) is not supported") != std::string::npos);
  // Without a driver the call itself fails cleanly after validating.
  if (!runtime::driverAvailable()) {
    Status s = ops::pagedAttention(validParams());
    REQUIRE_FALSE(s.isOk());
    CHECK(s.diagnostic().message.find("CUDA driver not available") != std::string::npos);
  }
}

TEST_CASE("paged attention op: decode-like and prefill-like batches get their tilings", "[op]") {
  auto p = validParams();
  auto decode = ops::selectPagedAttentionVariant(p);
  CHECK(decode.blockM() == 16);
  CHECK(decode.tileSize == 64);
  CHECK(decode.numWarps == 4);
  p.numTokens = 40;
  p.maxQueryLen = 32;  // 32 tokens x 4 heads = 128 rows
  auto prefill = ops::selectPagedAttentionVariant(p);
  CHECK(prefill.blockM() == 128);
  CHECK(prefill.numWarps == 8);
  p.maxQueryLen = 31;
  CHECK(ops::selectPagedAttentionVariant(p).blockM() == 16);
  p.dtype = ScalarKind::F32;
  p.maxQueryLen = 1;
  CHECK(ops::selectPagedAttentionVariant(p).tileSize == 32);  // f32 runs on FMAs; its tile stays vLLM's
}

TEST_CASE("paged attention op: launches on device buffers match the reference", "[gpu][op]") {
  if (!tests::gpuPresent()) return;
  // The caller owns the context, as an engine (or PyTorch) would: the op launches
  // in whatever context is current.
  REQUIRE(runtime::activatePrimaryContext(0).isOk());
  struct Case {
    ScalarKind dtype;
    bool causal;
    std::vector<int> queryLens, contextLens;
  } cases[] = {
      {ScalarKind::BF16, true, {1, 1, 1, 1, 1}, {300, 17, 1000, 0, 64}},      // decode: tile 64
      {ScalarKind::F16, false, {1, 40, 3, 77}, {50, 0, 130, 9}},              // prefill-like: 128 rows
      {ScalarKind::BF16, true, {129, 1, 33}, {0, 700, 250}},                  // chunked prefill + decode
  };
  for (const auto& c : cases) {
    compiler::UnifiedAttentionConfig config;
    config.dtype = c.dtype;
    config.causal = c.causal;
    compiler::AttentionShape shape;
    shape.queryLens = c.queryLens;
    shape.contextLens = c.contextLens;
    shape.seed = 11;
    INFO(shape.str());
    auto problem = compiler::UnifiedAttentionProblem::create(config, shape);
    REQUIRE(problem.isOk());
    std::vector<runtime::DeviceBuffer> device;
    for (auto& buffer : (*problem)->buffers()) {
      auto d = runtime::DeviceBuffer::allocate(std::max<size_t>(buffer.bytes.size(), 16));
      REQUIRE(d.isOk());
      REQUIRE(d->copyFromHost(buffer.bytes.data(), buffer.bytes.size()).isOk());
      device.push_back(std::move(*d));
    }
    const auto& s = (*problem)->scalarArguments();
    REQUIRE(s.size() == 12);  // scale, num_seqs, search steps, 9 strides
    auto integer = [&](size_t i) { return std::get<int64_t>(s[i]); };
    ops::PagedAttentionParams p;
    p.dtype = c.dtype;
    p.numQueryHeads = config.numQueryHeads;
    p.numKvHeads = config.numKvHeads;
    p.headSize = config.headSize;
    p.blockSize = config.blockSize;
    p.causal = c.causal;
    p.numSeqs = static_cast<int>(c.queryLens.size());
    p.numTokens = std::accumulate(c.queryLens.begin(), c.queryLens.end(), int64_t{0});
    p.maxQueryLen = *std::max_element(c.queryLens.begin(), c.queryLens.end());
    p.scale = static_cast<float>(std::get<double>(s[0]));
    p.out = device[0].address();
    p.q = device[1].address();
    p.kvCache = device[2].address();
    p.blockTables = device[3].address();
    p.seqLens = device[4].address();
    p.cuSeqlensQ = device[5].address();
    p.qStrideToken = integer(3);
    p.qStrideHead = integer(4);
    p.oStrideToken = integer(5);
    p.oStrideHead = integer(6);
    p.blockTableStride = integer(7);
    p.kvStrideBlock = integer(8);
    p.kvStrideKv = integer(9);
    p.kvStrideToken = integer(10);
    p.kvStrideHead = integer(11);
    INFO(ops::selectPagedAttentionVariant(p).kernelName());
    Status launched = ops::pagedAttention(p);
    INFO((launched ? std::string() : launched.diagnostic().str()));
    REQUIRE(launched.isOk());
    REQUIRE(runtime::synchronizeContext().isOk());
    std::vector<uint8_t> output((*problem)->buffers()[0].bytes.size());
    REQUIRE(device[0].copyToHost(output.data(), output.size()).isOk());
    compiler::AttentionRunResult result;
    (*problem)->check(output, result);
    INFO("max abs error " << result.maxAbsError << " (tolerance " << result.tolerance << "); " << result.detail);
    CHECK(result.passed);
  }
}
