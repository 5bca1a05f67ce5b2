// The shell of a kernel whose programs each run one straight body (no family
// machinery beyond a config): named, documented, with its warp count and
// constexprs, the body built by a callback over the Builder and the kernel
// (which adds the parameters). The copy kernels (convert_cache, copy_blocks)
// share it.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ir/Builder.h"
#include "ir/KernelAttributes.h"

namespace attnjit::compiler {

template <typename Body>
support::Expected<std::unique_ptr<ir::Kernel>> buildFlatKernel(std::string name, std::string doc, int numWarps,
                                                              std::vector<ir::Constexpr> constexprs, Body body) {
  auto kernel = std::make_unique<ir::Kernel>(std::move(name));
  kernel->docLines().push_back(std::move(doc));
  ir::setKernelAttribute(*kernel, ir::KernelAttribute::NumWarps, numWarps);
  for (ir::Constexpr& c : constexprs) kernel->constexprs().push_back(std::move(c));
  ir::Builder builder(*kernel);
  body(builder, *kernel);
  if (support::Status s = builder.finish(); !s) return s;
  return kernel;
}

}  // namespace attnjit::compiler
