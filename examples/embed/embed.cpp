// Embedding attnjit from C++: a runtime, a kernel from spec text, its PTX and
// compile statistics; on a GPU, one launch on the caller's stream.
#include <cstdio>
#include <vector>

#include "attnjit/jit.hpp"
#include "attnjit/runtime/DeviceBuffer.h"
#include "attnjit/runtime/Stream.h"

namespace {

const char* kSpec = R"(family: merge_attn_states
params:
  dtype: f32
  num_heads: 8
  head_size: 128
  output_lse: false
)";

int fail(const attnjit::Status& status) {
  std::fprintf(stderr, "embed_cpp: %s\n", status.message().c_str());
  return 1;
}

}  // namespace

int main() {
  std::printf("attnjit %s\n", attnjit::version());
  auto runtime = attnjit::Jit::create();
  if (!runtime) return fail(runtime.status());
  auto kernel = runtime->kernelFromSpecText(kSpec);
  if (!kernel) return fail(kernel.status());
  if (attnjit::Status s = kernel->compile(); !s) return fail(s);
  attnjit::CompileStats stats = kernel->stats();
  std::printf("%s for %s: passes %.1f ms, LLVM %.1f ms, PTX %.1f ms, %zu parameters\n", kernel->name().c_str(),
              stats.target.c_str(), stats.passesMs, stats.llvmLowerMs + stats.llvmOptimizeMs, stats.ptxEmitMs,
              kernel->parameters().size());

  if (!attnjit::runtime::driverAvailable()) {
    std::printf("GPU part skipped: %s\n", attnjit::runtime::driverStatus().message().c_str());
    return 0;
  }
  // Merge two partial results of 64 tokens x 8 heads x 128: out = prefix and
  // suffix weighted by exp(LSE); equal LSEs average them.
  const int tokens = 64, heads = 8, headSize = 128;
  const size_t elements = size_t(tokens) * heads * headSize;
  std::vector<float> prefix(elements, 1.0f), suffix(elements, 3.0f), lse(size_t(heads) * tokens, 0.5f);
  auto out = attnjit::runtime::DeviceBuffer::allocate(elements * 4);
  auto dPrefix = attnjit::runtime::DeviceBuffer::allocate(elements * 4);
  auto dSuffix = attnjit::runtime::DeviceBuffer::allocate(elements * 4);
  auto dLse = attnjit::runtime::DeviceBuffer::allocate(lse.size() * 4);
  if (!out || !dPrefix || !dSuffix || !dLse) return fail(out ? dLse.status() : out.status());
  if (attnjit::Status s = dPrefix->copyFromHost(prefix.data(), elements * 4); !s) return fail(s);
  if (attnjit::Status s = dSuffix->copyFromHost(suffix.data(), elements * 4); !s) return fail(s);
  if (attnjit::Status s = dLse->copyFromHost(lse.data(), lse.size() * 4); !s) return fail(s);
  using attnjit::KernelArgument;
  std::vector<KernelArgument> args = {KernelArgument::devicePointer(out->address()),
                                      KernelArgument::devicePointer(dPrefix->address()),
                                      KernelArgument::devicePointer(dLse->address()),
                                      KernelArgument::devicePointer(dSuffix->address()),
                                      KernelArgument::devicePointer(dLse->address()),
                                      KernelArgument::integerValue(tokens)};
  for (int i = 0; i < 3; ++i) {
    args.push_back(KernelArgument::integerValue(heads * headSize));
    args.push_back(KernelArgument::integerValue(headSize));
  }
  auto stream = attnjit::runtime::Stream::create();
  if (!stream) return fail(stream.status());
  if (attnjit::Status s = kernel->launch({(tokens + 15) / 16, heads, 1}, args, stream->handle()); !s) return fail(s);
  if (attnjit::Status s = stream->synchronize(); !s) return fail(s);
  std::vector<float> result(elements);
  if (attnjit::Status s = out->copyToHost(result.data(), elements * 4); !s) return fail(s);
  stats = kernel->stats();
  std::printf("launched (%s): %d registers, out[0] = %.3f (expected 2.000)\n", attnjit::kernelOriginName(stats.origin),
              stats.registers, result[0]);
  return result[0] == 2.0f ? 0 : 1;
}
