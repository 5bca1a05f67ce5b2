// f32 → fp8 before sm_89 (no fp8 cvt): the instructions codegen emits there,
// evaluated by LLVM's constant folder, give bit for bit what PTX
// cvt.rn.satfinite.e4m3x2/e5m2x2.f32 gives (ir::encodeFloat: round to nearest
// even, saturation at ±max finite, NaN → 0x7F) on every rounding position of
// every f32 binade, the specials, every fp8 value and every midpoint between
// two, and random bits; a cast kernel assembles for sm_80 without the cvt; and
// [gpu] the sm_80 kernel, JIT-compiled by the driver for the local GPU, writes
// the same bytes on the device.
#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "codegen/Codegen.h"
#include "compiler/driver/CompileDriver.h"
#include "compiler/driver/DeviceTarget.h"
#include "ir/Numeric.h"
#include "ir/Parser.h"
#include "runtime/DeviceBuffer.h"
#include "runtime/Module.h"
#include "runtime/Stream.h"
#include "test_tools.h"

using namespace attnjit;
using ir::ScalarKind;

namespace {

float fromBits(uint32_t bits) { return std::bit_cast<float>(bits); }

// Mantissas around every rounding position p: k·2^p for a few k, the exact
// halfway points (2k + 1)·2^(p-1), and one unit either side of each.
std::vector<float> roundingPositionInputs() {
  std::vector<float> inputs;
  for (uint32_t sign : {0u, 1u})
    for (uint32_t exponent = 0; exponent < 256; ++exponent)
      for (uint32_t p = 1; p < 23; ++p)
        for (uint32_t k : {0u, 1u, 6u, 7u}) {
          const uint32_t mantissaMask = (1u << 23) - 1;
          for (uint32_t centre : {k << p, ((2 * k + 1) << (p - 1))})
            for (int delta : {-1, 0, 1}) {
              const uint32_t mantissa = (centre + static_cast<uint32_t>(delta)) & mantissaMask;
              inputs.push_back(fromBits(sign << 31 | exponent << 23 | mantissa));
            }
        }
  return inputs;
}

// Every value of the format, the midpoints between neighbours (exact in f32),
// one f32 ulp either side of both, and the specials.
std::vector<float> formatInputs(ScalarKind kind) {
  std::vector<double> values;
  for (uint32_t bits = 0; bits < 0x80; ++bits) {
    const double value = ir::decodeFloat(bits, kind);
    if (!std::isnan(value) && !std::isinf(value)) values.push_back(value);
  }
  std::vector<float> inputs;
  for (size_t i = 0; i < values.size(); ++i) {
    std::vector<double> points = {values[i]};
    if (i + 1 < values.size()) points.push_back((values[i] + values[i + 1]) / 2);
    // Beyond the largest finite value: its would-be next neighbour's midpoint.
    if (i + 1 == values.size()) points.push_back(values[i] * (1 + 1.0 / 16));
    for (double point : points)
      for (double sign : {1.0, -1.0}) {
        const float f = static_cast<float>(sign * point);
        inputs.push_back(f);
        inputs.push_back(std::nextafter(f, std::numeric_limits<float>::infinity()));
        inputs.push_back(std::nextafter(f, -std::numeric_limits<float>::infinity()));
      }
  }
  for (uint32_t bits : {0x00000000u, 0x80000000u, 0x00000001u, 0x807FFFFFu, 0x7F7FFFFFu, 0xFF7FFFFFu, 0x7F800000u,
                        0xFF800000u, 0x7FC00000u, 0xFFC00000u, 0x7F800001u, 0xFFBFFFFFu})
    inputs.push_back(fromBits(bits));
  return inputs;
}

std::vector<float> randomInputs(size_t count) {
  std::mt19937 rng(20261204);
  std::vector<float> inputs;
  for (size_t i = 0; i < count; ++i) inputs.push_back(fromBits(static_cast<uint32_t>(rng())));
  // Random values in the formats' ranges, where most encodings differ.
  std::normal_distribution<float> normal(0.0f, 64.0f);
  for (size_t i = 0; i < count; ++i) inputs.push_back(normal(rng));
  return inputs;
}

// The encodings in `got` (of `inputs`, in order) that differ from
// ir::encodeFloat's; the first few are reported by their bits (`source` says
// whose encodings they are).
size_t countMismatches(std::span<const float> inputs, std::span<const uint8_t> got, ScalarKind kind,
                       const char* source, size_t reportedBefore = 0) {
  size_t mismatches = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const uint32_t expected = ir::encodeFloat(static_cast<double>(inputs[i]), kind);
    if (got[i] == expected) continue;
    if (reportedBefore + ++mismatches <= 8) {
      char line[112];
      std::snprintf(line, sizeof line, "f32 0x%08X (%.9g): %s 0x%02X, cvt.rn.satfinite 0x%02X",
                    std::bit_cast<uint32_t>(inputs[i]), static_cast<double>(inputs[i]), source, got[i], expected);
      UNSCOPED_INFO(line);
    }
  }
  return mismatches;
}

// Checks the software encoding of every input against ir::encodeFloat.
void checkEncodings(const std::vector<float>& inputs, ScalarKind kind) {
  constexpr size_t kBatch = 20000;  // constants per LLVM context stay bounded
  size_t mismatches = 0;
  for (size_t start = 0; start < inputs.size(); start += kBatch) {
    const size_t count = std::min(kBatch, inputs.size() - start);
    const std::span<const float> batch(inputs.data() + start, count);
    const std::vector<uint8_t> got = codegen::softwareFp8Encodings(batch, kind);
    REQUIRE(got.size() == count);
    mismatches += countMismatches(batch, got, kind, "software", mismatches);
  }
  CHECK(mismatches == 0);
}

}  // namespace

TEST_CASE("fp8 encodings without the fp8 cvt match cvt.rn.satfinite bit for bit", "[codegen][fp8]") {
  const std::vector<float> rounding = roundingPositionInputs();
  const std::vector<float> random = randomInputs(50000);
  for (ScalarKind kind : {ScalarKind::F8E4M3, ScalarKind::F8E5M2}) {
    INFO(ir::scalarName(kind));
    checkEncodings(formatInputs(kind), kind);
    checkEncodings(rounding, kind);
    checkEncodings(random, kind);
  }
}

namespace {

// out[i] = fp8(x[i]) for `elements` a program, one program per block of them.
std::string castKernelText(const std::string& to, int elements) {
  const std::string n = std::to_string(elements);
  return "kernel @cast_f32_" + to + "(%x: ptr<global, f32>, %out: ptr<global, " + to +
         ">) attributes {num_warps = 4} {\n"
         "  %pid = program_id {axis = 0} : i32\n"
         "  %block = constant {value = " + n + "} : i32\n"
         "  %first = mul %pid, %block : i32\n"
         "  %firsts = splat %first : tile<" + n + "xi32>\n"
         "  %lanes = arange {start = 0, end = " + n + "} : tile<" + n + "xi32>\n"
         "  %offs = add %firsts, %lanes : tile<" + n + "xi32>\n"
         "  %xp = splat %x : tile<" + n + "xptr<global, f32>>\n"
         "  %xs = addptr %xp, %offs : tile<" + n + "xptr<global, f32>>\n"
         "  %v = load %xs : tile<" + n + "xf32>\n"
         "  %r = cast %v : tile<" + n + "x" + to + ">\n"
         "  %op = splat %out : tile<" + n + "xptr<global, " + to + ">>\n"
         "  %os = addptr %op, %offs : tile<" + n + "xptr<global, " + to + ">>\n"
         "  store %os, %r\n"
         "  return\n"
         "}\n";
}

}  // namespace

TEST_CASE("f32 to fp8 casts compile before sm_89 without the fp8 cvt and assemble", "[codegen][fp8][ptxas]") {
  for (const char* to : {"f8e4m3", "f8e5m2"})
    for (const char* target : {"sm_80", "sm_86"}) {
      INFO(to << " for " << target);
      const std::string text = castKernelText(to, 64);
      auto module = ir::parseModule(text, "cast.tir");
      if (!module) FAIL(module.diagnostic().str());
      compiler::CompileOptions options;
      options.target = target;
      auto compiled = compiler::compileKernel(*(*module)->kernels()[0], options);
      if (!compiled) FAIL(compiled.diagnostic().str());
      CHECK(compiled->ptx.find("e4m3x2") == std::string::npos);
      CHECK(compiled->ptx.find("e5m2x2") == std::string::npos);
      attnjit::tests::checkAssembles(compiled->ptx, target);
    }
}

TEST_CASE("gpu: sm_80's fp8 encodings on the device match cvt.rn.satfinite", "[gpu][codegen][fp8]") {
  if (!tests::gpuPresent()) return;
  REQUIRE(compiler::localTarget().isOk());
  // Every f32 with the low 8 mantissa bits dropped (2^24 values: every rounding
  // decision of both formats looks at higher bits or at the sticky bits these
  // keep), then the structured inputs above; the device's bytes against
  // ir::encodeFloat. The PTX is sm_80's: the driver compiles it for this GPU.
  constexpr int kBlock = 1024;
  std::vector<float> inputs;
  inputs.reserve((size_t{1} << 24) + 600000);
  for (uint32_t high = 0; high < (1u << 24); ++high) inputs.push_back(fromBits(high << 8 | (high & 0xFF)));
  for (float x : roundingPositionInputs()) inputs.push_back(x);
  for (ScalarKind kind : {ScalarKind::F8E4M3, ScalarKind::F8E5M2})
    for (float x : formatInputs(kind)) inputs.push_back(x);
  while (inputs.size() % kBlock != 0) inputs.push_back(0.0f);
  const size_t n = inputs.size();
  auto x = runtime::DeviceBuffer::allocate(n * sizeof(float));
  auto out = runtime::DeviceBuffer::allocate(n);
  REQUIRE(x.isOk());
  REQUIRE(out.isOk());
  REQUIRE(x->copyFromHost(inputs.data(), n * sizeof(float)).isOk());
  for (ScalarKind kind : {ScalarKind::F8E4M3, ScalarKind::F8E5M2}) {
    const std::string to = ir::scalarName(kind);
    INFO(to);
    auto module = ir::parseModule(castKernelText(to, kBlock), "cast.tir");
    if (!module) FAIL(module.diagnostic().str());
    compiler::CompileOptions options;
    options.target = "sm_80";
    auto compiled = compiler::compileKernel(*(*module)->kernels()[0], options);
    if (!compiled) FAIL(compiled.diagnostic().str());
    CHECK(compiled->ptx.find("e4m3x2") == std::string::npos);
    const tests::GpuKernel loaded = tests::loadOnGpu(*compiled, "cast.ptx");
    // Poisoned twice with different bytes: an element the kernel skips cannot
    // match both times.
    std::vector<uint8_t> got(n), again(n);
    for (uint8_t poison : {uint8_t{0xA5}, uint8_t{0x5A}}) {
      REQUIRE(out->fill(poison).isOk());
      void* params[] = {x->kernelArgument(), out->kernelArgument()};
      runtime::LaunchConfig config;
      config.grid = {static_cast<unsigned>(n / kBlock), 1, 1};
      config.block = {static_cast<unsigned>(compiled->numThreads), 1, 1};
      config.dynamicSharedBytes = static_cast<unsigned>(compiled->sharedMemoryBytes);
      REQUIRE(loaded.function.launch(config, params).isOk());
      REQUIRE(runtime::synchronizeStream(nullptr).isOk());
      REQUIRE(out->copyToHost((poison == 0xA5 ? got : again).data(), n).isOk());
    }
    CHECK(got == again);
    CHECK(countMismatches(inputs, got, kind, "device") == 0);
  }
}
