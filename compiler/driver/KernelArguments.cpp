#include "compiler/driver/KernelArguments.h"

#include "runtime/ArgumentPromises.h"

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <limits>

namespace attnjit::compiler {

PackedParameter packParameter(const ir::Type& type, const std::variant<int64_t, double>& value) {
  PackedParameter p;
  const double asDouble = std::holds_alternative<double>(value) ? std::get<double>(value)
                                                                : static_cast<double>(std::get<int64_t>(value));
  const int64_t asInt = std::holds_alternative<int64_t>(value) ? std::get<int64_t>(value)
                                                               : static_cast<int64_t>(std::get<double>(value));
  switch (type.scalarKind()) {
    case ir::ScalarKind::F32: {
      const float f = static_cast<float>(asDouble);
      std::memcpy(p.bytes, &f, sizeof f);
      break;
    }
    case ir::ScalarKind::F64: std::memcpy(p.bytes, &asDouble, sizeof asDouble); break;
    case ir::ScalarKind::I64: std::memcpy(p.bytes, &asInt, sizeof asInt); break;
    default: {
      const int32_t i = static_cast<int32_t>(asInt);
      std::memcpy(p.bytes, &i, sizeof i);
      break;
    }
  }
  return p;
}

const char* kernelArgumentKindName(KernelArgument::Kind kind) {
  switch (kind) {
    case KernelArgument::Kind::Pointer: return "a device pointer";
    case KernelArgument::Kind::Integer: return "an integer";
    case KernelArgument::Kind::Real: return "a real number";
  }
  return "an argument";
}

KernelArgument::Kind KernelParameter::kind() const {
  if (type.isPointer()) return KernelArgument::Kind::Pointer;
  return ir::isFloat(type.scalarKind()) ? KernelArgument::Kind::Real : KernelArgument::Kind::Integer;
}

std::vector<KernelParameter> kernelParameters(const ir::Kernel& kernel) {
  std::vector<KernelParameter> parameters;
  for (size_t i = 0; i < kernel.numParameters(); ++i) {
    KernelParameter p;
    p.name = kernel.parameter(i)->name();
    p.type = kernel.parameter(i)->type();
    const ir::Attributes& attrs = kernel.parameterAttrs(i);
    if (attrs.has("align")) p.alignBytes = attrs.getInt("align");
    if (attrs.has("divisibility")) p.divisibility = attrs.getInt("divisibility");
    parameters.push_back(std::move(p));
  }
  return parameters;
}

std::vector<void*> PackedArguments::driverPointers() {
  std::vector<void*> pointers;
  pointers.reserve(values_.size());
  for (PackedParameter& value : values_) pointers.push_back(value.bytes);
  return pointers;
}

support::Expected<PackedArguments> packKernelArguments(const std::string& what,
                                                       const std::vector<KernelParameter>& parameters,
                                                       std::span<const KernelArgument> arguments) {
  auto error = [&](const KernelParameter& p, const std::string& message) {
    return support::Diagnostic{{}, what + ": parameter '" + p.name + "' (" + p.type.str() + ") " + message};
  };
  if (arguments.size() != parameters.size())
    return support::Diagnostic{{}, what + ": takes " + std::to_string(parameters.size()) + " arguments, got " +
                                  std::to_string(arguments.size())};
  PackedArguments packed;
  for (size_t i = 0; i < parameters.size(); ++i) {
    const KernelParameter& p = parameters[i];
    const KernelArgument& a = arguments[i];
    if (a.kind != p.kind())
      return error(p, std::string("takes ") + kernelArgumentKindName(p.kind()) + ", got " +
                          kernelArgumentKindName(a.kind));
    switch (a.kind) {
      case KernelArgument::Kind::Pointer: {
        if (auto broken = runtime::pointerPromiseBroken(a.pointer, p.alignBytes)) return error(p, *broken);
        PackedParameter value;
        static_assert(sizeof value.bytes >= sizeof a.pointer);
        std::memcpy(value.bytes, &a.pointer, sizeof a.pointer);
        packed.append(value);
        break;
      }
      case KernelArgument::Kind::Integer: {
        if (auto broken = runtime::divisibilityPromiseBroken(a.integer, p.divisibility)) return error(p, *broken);
        if (ir::storageBits(p.type.scalarKind()) <= 32 &&
            (a.integer < std::numeric_limits<int32_t>::min() || a.integer > std::numeric_limits<int32_t>::max()))
          return error(p, "is " + std::to_string(a.integer) + ", outside the 32-bit range");
        packed.append(packParameter(p.type, a.integer));
        break;
      }
      case KernelArgument::Kind::Real: packed.append(packParameter(p.type, a.real)); break;
    }
  }
  return packed;
}

}  // namespace attnjit::compiler
