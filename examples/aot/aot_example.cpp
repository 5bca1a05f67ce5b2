// Uses an ahead-of-time bundle the way an engine would: no LLVM and no attnjit compiler in the
// process, only the runtime library, the bundle directory and the header `attnjit aot`
// generated for it (attnjit_bundle_kernels.h, typed launchers over runtime/attnjit_bundle.h).
//
//   attnjit aot examples/aot/merge_attn_states_f32.yaml --arch sm_80,sm_90a -o bundle
//   attnjit_aot_example bundle
//
// It opens the bundle, checks arguments (a good set, a misaligned pointer, a stride that breaks
// the kernel's divisibility promise), and then launches merge_attn_states on the GPU and
// compares the result with the same merge computed here. Without a CUDA driver the launch
// reports ATTNJIT_BUNDLE_ERROR_NO_DRIVER and the example stops there.
//
// Exit status: 0 launched and correct; 1 a check failed; 2 no CUDA driver (everything up to the
// launch worked); 3 the bundle could not be used.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "attnjit_bundle_kernels.h"
#include "runtime/DeviceBuffer.h"
#include "runtime/Stream.h"

namespace {

constexpr int kTokens = 37;
constexpr int kHeads = 4;        // num_heads of the bundled variant
constexpr int kHeadSize = 64;    // head_size of the bundled variant
constexpr int kBlockTokens = 16; // BLOCK_TOKENS: the grid is (ceil(tokens / 16), heads)

// Strides in elements of [tokens][heads][head_size] outputs.
constexpr int64_t kStrideToken = kHeads * kHeadSize;
constexpr int64_t kStrideHead = kHeadSize;

struct DevicePointers {
  float* output;
  float* outputLse;
  float* prefixOutput;
  float* prefixLse;
  float* suffixOutput;
  float* suffixLse;
};

attnjit_bundle_status launch(attnjit_bundle* bundle, const DevicePointers& p, int64_t strideToken, void* stream) {
  const attnjit_bundle_dim3 grid = {(kTokens + kBlockTokens - 1) / kBlockTokens, kHeads, 1};
  return attnjit_launch_merge_attn_states_f32_h4_d64_lse(bundle, p.output, p.outputLse, p.prefixOutput, p.prefixLse,
                                                         p.suffixOutput, p.suffixLse, kTokens, strideToken,
                                                         kStrideHead, kStrideToken, kStrideHead, kStrideToken,
                                                         kStrideHead, grid, stream);
}

attnjit_bundle_status check(attnjit_bundle* bundle, const DevicePointers& p, int64_t strideToken) {
  return attnjit_check_merge_attn_states_f32_h4_d64_lse(bundle, p.output, p.outputLse, p.prefixOutput, p.prefixLse,
                                                        p.suffixOutput, p.suffixLse, kTokens, strideToken, kStrideHead,
                                                        kStrideToken, kStrideHead, kStrideToken, kStrideHead);
}

// Addresses that are never dereferenced: the checks only look at them.
DevicePointers placeholderPointers(std::uintptr_t base) {
  auto at = [&](int i) { return reinterpret_cast<float*>(base + static_cast<std::uintptr_t>(i) * 0x10000); };
  return DevicePointers{at(1), at(2), at(3), at(4), at(5), at(6)};
}

bool expectStatus(const char* what, attnjit_bundle_status status, attnjit_bundle_status expected) {
  std::printf("%-34s -> %d %s\n", what, static_cast<int>(status), status == ATTNJIT_BUNDLE_OK ? "ok" : attnjit_bundle_last_error());
  if (status == expected) return true;
  std::printf("aot example: FAILED: expected status %d\n", static_cast<int>(expected));
  return false;
}

// The merge, computed on the host in double (finite LSEs only).
void hostMerge(const std::vector<float>& prefixOutput, const std::vector<float>& prefixLse,
               const std::vector<float>& suffixOutput, const std::vector<float>& suffixLse,
               std::vector<double>& output, std::vector<double>& outputLse) {
  output.assign(prefixOutput.size(), 0.0);
  outputLse.assign(prefixLse.size(), 0.0);
  for (int h = 0; h < kHeads; ++h) {
    for (int t = 0; t < kTokens; ++t) {
      const double p = prefixLse[h * kTokens + t], s = suffixLse[h * kTokens + t];
      const double m = std::max(p, s);
      const double pw = std::exp(p - m), sw = std::exp(s - m);
      for (int d = 0; d < kHeadSize; ++d) {
        const std::size_t i = static_cast<std::size_t>(t * kStrideToken + h * kStrideHead + d);
        output[i] = (prefixOutput[i] * pw + suffixOutput[i] * sw) / (pw + sw);
      }
      outputLse[h * kTokens + t] = std::log(pw + sw) + m;
    }
  }
}

int runOnGpu(attnjit_bundle* bundle) {
  using attnjit::runtime::DeviceBuffer;
  const std::size_t outputElements = static_cast<std::size_t>(kTokens) * kHeads * kHeadSize;
  const std::size_t lseElements = static_cast<std::size_t>(kHeads) * kTokens;
  std::mt19937 random(7);
  std::uniform_real_distribution<float> values(-2.0f, 2.0f), lses(-4.0f, 4.0f);
  std::vector<float> prefixOutput(outputElements), suffixOutput(outputElements), prefixLse(lseElements),
      suffixLse(lseElements);
  for (float& v : prefixOutput) v = values(random);
  for (float& v : suffixOutput) v = values(random);
  for (float& v : prefixLse) v = lses(random);
  for (float& v : suffixLse) v = lses(random);

  std::vector<DeviceBuffer> buffers;
  for (std::size_t elements : {outputElements, lseElements, outputElements, lseElements, outputElements, lseElements}) {
    auto buffer = DeviceBuffer::allocate(elements * sizeof(float));
    if (!buffer) {
      std::printf("aot example: cannot allocate device memory: %s\n", buffer.status().message().c_str());
      return 3;
    }
    buffers.push_back(std::move(*buffer));
  }
  const std::vector<float>* inputs[] = {nullptr, nullptr, &prefixOutput, &prefixLse, &suffixOutput, &suffixLse};
  for (std::size_t i = 0; i < buffers.size(); ++i) {
    if (inputs[i] == nullptr) continue;
    if (auto copied = buffers[i].copyFromHost(inputs[i]->data(), inputs[i]->size() * sizeof(float)); !copied) {
      std::printf("aot example: upload failed: %s\n", copied.message().c_str());
      return 3;
    }
  }
  auto pointer = [&](std::size_t i) { return reinterpret_cast<float*>(static_cast<std::uintptr_t>(buffers[i].address())); };
  const DevicePointers device{pointer(0), pointer(1), pointer(2), pointer(3), pointer(4), pointer(5)};
  if (!expectStatus("launch on the GPU", launch(bundle, device, kStrideToken, nullptr), ATTNJIT_BUNDLE_OK)) return 1;
  if (auto synchronized = attnjit::runtime::synchronizeStream(nullptr); !synchronized) {
    std::printf("aot example: the kernel failed: %s\n", synchronized.message().c_str());
    return 3;
  }
  std::vector<float> output(outputElements), outputLse(lseElements);
  if (!buffers[0].copyToHost(output.data(), output.size() * sizeof(float)) ||
      !buffers[1].copyToHost(outputLse.data(), outputLse.size() * sizeof(float))) {
    std::printf("aot example: download failed\n");
    return 3;
  }
  std::vector<double> expected, expectedLse;
  hostMerge(prefixOutput, prefixLse, suffixOutput, suffixLse, expected, expectedLse);
  double maxError = 0;
  for (std::size_t i = 0; i < output.size(); ++i) maxError = std::max(maxError, std::fabs(output[i] - expected[i]));
  for (std::size_t i = 0; i < outputLse.size(); ++i) {
    maxError = std::max(maxError, std::fabs(outputLse[i] - expectedLse[i]));
  }
  // f32 math with exp/log: a few units in the last place of values of size ~4.
  const double tolerance = 1e-5;
  std::printf("aot example: max abs error vs host merge %.3g (tolerance %.0e): %s\n", maxError, tolerance,
              maxError <= tolerance ? "PASS" : "FAIL");
  return maxError <= tolerance ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s BUNDLE_DIR\n", argv[0]);
    return 3;
  }
  attnjit_bundle* bundle = nullptr;
  if (attnjit_bundle_open(argv[1], &bundle) != ATTNJIT_BUNDLE_OK) {
    std::printf("aot example: cannot open the bundle: %s\n", attnjit_bundle_last_error());
    return 3;
  }
  std::printf("aot example: bundle %s holds %zu kernel(s)\n", argv[1], attnjit_bundle_kernel_count(bundle));

  const DevicePointers placeholders = placeholderPointers(0x7f0000000000);
  DevicePointers misaligned = placeholders;
  misaligned.prefixOutput = reinterpret_cast<float*>(reinterpret_cast<std::uintptr_t>(misaligned.prefixOutput) + 4);
  bool ok = expectStatus("check: valid arguments", check(bundle, placeholders, kStrideToken), ATTNJIT_BUNDLE_OK) &&
            expectStatus("check: misaligned prefix_output", check(bundle, misaligned, kStrideToken),
                         ATTNJIT_BUNDLE_ERROR_BAD_LAUNCH_ARGUMENT) &&
            expectStatus("check: o_stride_token = 257", check(bundle, placeholders, kStrideToken + 1),
                         ATTNJIT_BUNDLE_ERROR_BAD_LAUNCH_ARGUMENT);
  int status = ok ? 0 : 1;
  if (ok && !attnjit::runtime::driverAvailable()) {
    // Safe with placeholder addresses: without a driver nothing reaches a GPU.
    if (expectStatus("launch without a driver", launch(bundle, placeholders, kStrideToken, nullptr),
                     ATTNJIT_BUNDLE_ERROR_NO_DRIVER)) {
      std::printf("aot example: stopped before the launch: no CUDA driver\n");
      status = 2;
    } else {
      status = 1;
    }
  } else if (ok) {
    status = runOnGpu(bundle);
  }
  attnjit_bundle_close(bundle);
  return status;
}
