// TMA tensor maps (runtime/TensorMap.h): the driver's limits checked on the
// host with messages that name the rule, and on the GPU a box copied by
// cp.async.bulk.tensor landing where the map and its swizzle say.
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/DeviceBuffer.h"
#include "runtime/Driver.h"
#include "runtime/Module.h"
#include "runtime/TensorMap.h"
#include "test_runtime_fixtures.h"
#include "test_tools.h"

using namespace attnjit::runtime;
using attnjit::runtime::testing::gpuAvailable;

namespace {

// A bf16 paged KV cache as TMA sees it (innermost first: head_size 128, 8 KV
// heads, 16 tokens a block, K and V, 1000 blocks), one box = one block's 16
// rows of half a head (64 elements, 128 bytes: the 128-byte swizzle's span).
TensorMapShape pagedCache() {
  TensorMapShape shape;
  shape.element = TensorMapElement::BF16;
  shape.address = 0x7f0000000000;
  shape.dims = {128, 8, 16, 2, 1000};
  shape.strides = {256, 2048, 32768, 65536};
  shape.box = {64, 1, 16, 1, 1};
  shape.swizzle = TensorMapSwizzle::Bytes128;
  return shape;
}

std::string messageOf(const TensorMapShape& shape) {
  attnjit::support::Status status = validateTensorMap(shape);
  return status.isOk() ? std::string("ok") : status.message();
}

}  // namespace

TEST_CASE("tensor maps: the driver's limits are checked first, naming the dimension and the rule", "[runtime]") {
  CHECK(messageOf(pagedCache()) == "ok");
  CHECK(pagedCache().str() == "bf16 [128, 8, 16, 2, 1000] strides [256, 2048, 32768, 65536] box [64, 1, 16, 1, 1] "
                              "swizzle 128B");
  TensorMapShape shape = pagedCache();
  shape.dims.push_back(1);
  shape.strides.push_back(65536000);
  shape.box.push_back(1);
  CHECK_THAT(messageOf(shape), Catch::Contains("has 6 dimensions; TMA takes 1 to 5"));
  shape = pagedCache();
  shape.box.pop_back();
  CHECK_THAT(messageOf(shape), Catch::Contains("gives 4 box sizes for 5 dimensions"));
  shape = pagedCache();
  shape.strides.push_back(1);
  CHECK_THAT(messageOf(shape), Catch::Contains("gives 5 strides; 5 dimensions take 4 (dimension 0 is contiguous)"));
  shape = pagedCache();
  shape.address = 0;
  CHECK_THAT(messageOf(shape), Catch::Contains("the address is null"));
  shape.address = 0x7f0000000008;
  CHECK_THAT(messageOf(shape), Catch::Contains("is not 16-byte aligned"));
  shape = pagedCache();
  shape.dims[4] = 0;
  CHECK_THAT(messageOf(shape), Catch::Contains("dimension 4 has 0 elements; TMA takes 1 to 2^32"));
  shape.dims[4] = (std::uint64_t{1} << 32) + 1;
  CHECK_THAT(messageOf(shape), Catch::Contains("dimension 4 has 4294967297 elements"));
  shape = pagedCache();
  shape.box[2] = 257;
  CHECK_THAT(messageOf(shape), Catch::Contains("the box is 257 elements along dimension 2; TMA takes 1 to 256"));
  shape = pagedCache();
  shape.strides[1] = 2056;  // rows of a cache whose token stride is not a multiple of 16 bytes
  CHECK_THAT(messageOf(shape), Catch::Contains("dimension 2's stride (2056 bytes) must be a multiple of 16 below 2^40"));
  shape = pagedCache();
  shape.strides[3] = std::uint64_t{1} << 40;
  CHECK_THAT(messageOf(shape), Catch::Contains("dimension 4's stride (1099511627776 bytes)"));
  shape = pagedCache();
  shape.box[0] = 12;  // 24 bytes
  CHECK_THAT(messageOf(shape), Catch::Contains("the box's rows are 24 bytes; TMA copies multiples of 16"));
  shape = pagedCache();
  shape.box[0] = 128;  // a whole 256-byte head row: wider than the swizzle
  CHECK_THAT(messageOf(shape), Catch::Contains("the box's rows are 256 bytes, wider than the 128-byte swizzle: split "
                                               "dimension 0 into boxes of at most 64 elements"));
  shape.swizzle = TensorMapSwizzle::None;  // without a swizzle a box row may be that wide
  CHECK(messageOf(shape) == "ok");
  shape = pagedCache();
  shape.element = TensorMapElement::U8;  // an fp8 cache: 128 one-byte elements fill the span
  shape.strides = {128, 1024, 16384, 32768};
  shape.box[0] = 128;
  CHECK(messageOf(shape) == "ok");
  shape.swizzle = TensorMapSwizzle::Bytes64;
  CHECK_THAT(messageOf(shape), Catch::Contains("wider than the 64-byte swizzle"));

  // An invalid shape never reaches the driver; without one a valid shape
  // reports that there is none.
  shape = pagedCache();
  shape.address = 0;
  CHECK_THAT(encodeTensorMap(shape).status().message(), Catch::Contains("the address is null"));
  if (!driverAvailable())
    CHECK_THAT(encodeTensorMap(pagedCache()).status().message(), Catch::Contains("CUDA driver not available"));
}

namespace {

// One thread arms an mbarrier with the box's bytes and issues the copy; every
// thread waits for the barrier's phase, then the CTA writes the box as it
// sits in shared memory to `out`, 16 bytes a thread at a time.
const char* const kTmaBoxCopyPtx = R"(
.version 8.0
.target sm_90a
.address_size 64

.extern .shared .align 1024 .b8 tile[];

.visible .entry tma_box_copy(
    .param .align 64 .b8 map[128],
    .param .u64 out,
    .param .u32 x,
    .param .u32 y,
    .param .u32 bytes)
{
    .reg .pred %p<3>;
    .reg .b32 %r<16>;
    .reg .b64 %rd<6>;

    ld.param.u64 %rd1, [out];
    ld.param.u32 %r1, [x];
    ld.param.u32 %r2, [y];
    ld.param.u32 %r3, [bytes];
    mov.u32 %r4, %tid.x;
    mov.u32 %r5, tile;
    add.u32 %r6, %r5, %r3;
    setp.ne.u32 %p1, %r4, 0;
    @%p1 bra WAIT;
    mbarrier.init.shared.b64 [%r6], 1;
    fence.mbarrier_init.release.cluster;
    fence.proxy.async.shared::cta;
    mbarrier.arrive.expect_tx.shared.b64 _, [%r6], %r3;
    mov.u64 %rd5, map;
    cvta.param.u64 %rd5, %rd5;
    cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%r5], [%rd5, {%r1, %r2}], [%r6];
WAIT:
    bar.sync 0;
    mov.u32 %r7, 0;
SPIN:
    mbarrier.try_wait.parity.shared.b64 %p2, [%r6], %r7;
    @!%p2 bra SPIN;
    cvta.to.global.u64 %rd2, %rd1;
    shl.b32 %r8, %r4, 4;
COPY:
    setp.ge.u32 %p1, %r8, %r3;
    @%p1 bra DONE;
    add.u32 %r9, %r5, %r8;
    ld.shared.v4.u32 {%r10, %r11, %r12, %r13}, [%r9];
    cvt.u64.u32 %rd3, %r8;
    add.s64 %rd4, %rd2, %rd3;
    st.global.v4.u32 [%rd4], {%r10, %r11, %r12, %r13};
    add.u32 %r8, %r8, 2048;
    bra COPY;
DONE:
    ret;
}
)";

}  // namespace

TEST_CASE("tensor maps: the TMA test kernel assembles for sm_90a", "[runtime]") {
  attnjit::tests::checkAssembles(kTmaBoxCopyPtx, "sm_90a");
}

TEST_CASE("gpu: a TMA copy lands a box where its tensor map and swizzle say", "[runtime][gpu]") {
  if (!gpuAvailable()) return;
  auto info = deviceInfo(0);
  REQUIRE(info.isOk());
  if (info->smVersion() < 90) {
    WARN("skipped: device 0 is sm_" << info->smVersion() << "; TMA needs sm_90");
    return;
  }
  // A 40 × 96 matrix of 16-bit values, none zero, rows 192 bytes apart.
  constexpr std::uint32_t kRows = 40, kColumns = 96, kBoxRows = 16, kBoxColumns = 64;
  std::vector<std::uint16_t> matrix(kRows * kColumns);
  for (std::uint32_t r = 0; r < kRows; ++r)
    for (std::uint32_t c = 0; c < kColumns; ++c) matrix[r * kColumns + c] = static_cast<std::uint16_t>(r * 1000 + c + 1);
  auto source = DeviceBuffer::allocate(matrix.size() * 2);
  REQUIRE(source.isOk());
  REQUIRE(source->copyFromHost(matrix.data(), matrix.size() * 2).isOk());
  constexpr std::uint32_t kBoxBytes = kBoxRows * kBoxColumns * 2;
  auto out = DeviceBuffer::allocate(kBoxBytes);
  REQUIRE(out.isOk());

  auto image = moduleImageForPtx(kTmaBoxCopyPtx, "tma_box_copy.ptx");
  INFO((image ? std::string() : image.diagnostic().message));
  REQUIRE(image.isOk());
  auto module = Module::load(*image, "tma_box_copy.ptx");
  INFO((module ? std::string() : module.diagnostic().message));
  REQUIRE(module.isOk());
  auto function = module->function("tma_box_copy");
  REQUIRE(function.isOk());

  // The box at column x, row y; element (r, c) of the result as `expected` says.
  auto copyBox = [&](TensorMapSwizzle swizzle, std::uint32_t x, std::uint32_t y) {
    TensorMapShape shape;
    shape.element = TensorMapElement::BF16;
    shape.address = source->address();
    shape.dims = {kColumns, kRows};
    shape.strides = {kColumns * 2};
    shape.box = {kBoxColumns, kBoxRows};
    shape.swizzle = swizzle;
    auto map = encodeTensorMap(shape);
    INFO((map ? std::string() : map.diagnostic().message));
    REQUIRE(map.isOk());
    REQUIRE(out->fill(0xff).isOk());  // poison: every element must be written
    std::uint32_t bytes = kBoxBytes;
    void* params[] = {&*map, out->kernelArgument(), &x, &y, &bytes};
    LaunchConfig config;
    config.block = {128, 1, 1};
    config.dynamicSharedBytes = kBoxBytes + 16;
    attnjit::support::Status launched = function->launch(config, params);
    INFO(launched.message());
    REQUIRE(launched.isOk());
    REQUIRE(synchronizeContext().isOk());
    std::vector<std::uint16_t> box(kBoxRows * kBoxColumns);
    REQUIRE(out->copyToHost(box.data(), kBoxBytes).isOk());
    return box;
  };
  auto sourceAt = [&](std::uint32_t row, std::uint32_t column) -> std::uint16_t {
    return row < kRows && column < kColumns ? matrix[row * kColumns + column] : 0;  // outside: zeros
  };

  // No swizzle: the box row by row.
  std::vector<std::uint16_t> plain = copyBox(TensorMapSwizzle::None, 16, 8);
  int wrong = 0;
  for (std::uint32_t r = 0; r < kBoxRows; ++r)
    for (std::uint32_t c = 0; c < kBoxColumns; ++c) wrong += plain[r * kBoxColumns + c] != sourceAt(8 + r, 16 + c);
  CHECK(wrong == 0);

  // 128-byte swizzle: the 16-byte chunk k of row r (8 elements) sits at chunk
  // k xor (r mod 8), the layout the wgmma descriptors read.
  std::vector<std::uint16_t> swizzled = copyBox(TensorMapSwizzle::Bytes128, 0, 8);
  wrong = 0;
  for (std::uint32_t r = 0; r < kBoxRows; ++r)
    for (std::uint32_t c = 0; c < kBoxColumns; ++c) {
      const std::uint32_t chunk = (c / 8) ^ (r % 8);
      wrong += swizzled[r * kBoxColumns + chunk * 8 + c % 8] != sourceAt(8 + r, c);
    }
  CHECK(wrong == 0);

  // A box reaching past the last row and column reads zeros there.
  std::vector<std::uint16_t> edge = copyBox(TensorMapSwizzle::None, 64, 32);
  wrong = 0;
  int zeros = 0;
  for (std::uint32_t r = 0; r < kBoxRows; ++r)
    for (std::uint32_t c = 0; c < kBoxColumns; ++c) {
      wrong += edge[r * kBoxColumns + c] != sourceAt(32 + r, 64 + c);
      zeros += edge[r * kBoxColumns + c] == 0;
    }
  CHECK(wrong == 0);
  CHECK(zeros == static_cast<int>(kBoxRows * kBoxColumns - 8 * 32));  // 8 rows × 32 columns inside
}
