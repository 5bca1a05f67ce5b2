#include "compiler/cli/AotLaunchHeader.h"

#include <cstdio>
#include <set>

namespace attnjit::compiler::cli {
namespace {

using runtime::BundleKernel;
using runtime::BundleParameter;
using runtime::BundleParameterKind;

// A parameter named like a C keyword gets a trailing underscore in the C signature.
std::string cParameterName(const std::string& name) {
  static const std::set<std::string> keywords = {
      "auto",     "break",  "case",    "char",   "const",    "continue", "default",  "do",     "double",
      "else",     "enum",   "extern",  "float",  "for",      "goto",     "if",       "inline", "int",
      "long",     "register", "restrict", "return", "short", "signed",   "sizeof",   "static", "struct",
      "switch",   "typedef", "union",  "unsigned", "void",   "volatile", "while",    "bool",   "true",
      "false",    "_Bool",  "class",   "new",    "delete",   "this",     "template", "namespace"};
  return keywords.count(name) != 0 ? name + "_" : name;
}

// The C type of a parameter: element-typed pointers where C has the element type.
std::string cType(const BundleParameter& parameter) {
  if (parameter.kind == BundleParameterKind::Pointer) {
    if (parameter.dtype == "f32") return "float*";
    if (parameter.dtype == "f64") return "double*";
    if (parameter.dtype == "i8") return "int8_t*";
    if (parameter.dtype == "i16") return "int16_t*";
    if (parameter.dtype == "i32") return "int32_t*";
    if (parameter.dtype == "i64") return "int64_t*";
    return "void*";  // f16, bf16, fp8, i1, i4: no C type
  }
  if (parameter.kind == BundleParameterKind::Float) return parameter.dtype == "f64" ? "double" : "float";
  return parameter.dtype == "i64" ? "int64_t" : "int32_t";
}

std::string promiseComment(const BundleParameter& parameter) {
  std::string text = parameter.kind == BundleParameterKind::Pointer ? parameter.dtype + " elements" : parameter.dtype;
  if (parameter.align > 0) text += ", " + std::to_string(parameter.align) + "-byte aligned";
  if (parameter.divisibility > 0) text += ", a multiple of " + std::to_string(parameter.divisibility);
  return text;
}

std::string argumentExpression(const BundleParameter& parameter) {
  const std::string name = cParameterName(parameter.name);
  switch (parameter.kind) {
    case BundleParameterKind::Pointer: return "attnjit_bundle_pointer_arg(" + name + ")";
    case BundleParameterKind::Integer: return "attnjit_bundle_integer_arg(" + name + ")";
    case BundleParameterKind::Float: return "attnjit_bundle_float_arg(" + name + ")";
  }
  return name;
}

// Escapes a kernel name for a C string literal (names are C identifiers; kept for safety).
std::string cStringLiteral(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  return out + "\"";
}

// Comment text cannot close the comment early.
std::string commentSafe(std::string text) {
  for (std::size_t at = text.find("*/"); at != std::string::npos; at = text.find("*/", at)) text.replace(at, 2, "* /");
  return text;
}

void appendKernel(std::string& out, const BundleKernel& kernel) {
  const std::string count = std::to_string(kernel.parameters.size());
  std::string images;
  for (const auto& image : kernel.images) {
    images += (images.empty() ? "" : ", ") + image.arch + (image.cubin ? " (cubin, PTX)" : " (PTX)");
  }
  std::string constexprs;
  for (const auto& [name, value] : kernel.constexprs) {
    char number[32];
    std::snprintf(number, sizeof number, "%.17g", value);
    constexprs += (constexprs.empty() ? "" : ", ") + name + " = " + number;
  }
  out += "/* " + commentSafe(kernel.name) + " (" + commentSafe(kernel.family) + ": " + commentSafe(kernel.params) +
         ")\n";
  out += "   " + commentSafe(kernel.grid) + "\n";
  if (!kernel.stage2.empty()) {
    out += "   Split-KV stage 1: grid z = num_segments; it writes segm_output, segm_max and segm_expsum,\n"
           "   which attnjit_launch_" + commentSafe(kernel.stage2) + " (stage 2, after it on the same stream)\n"
           "   combines into the output.\n";
  }
  if (!constexprs.empty()) out += "   " + commentSafe(constexprs) + "\n";
  out += "   images: " + images + " */\n";

  std::string parameters;
  for (const BundleParameter& parameter : kernel.parameters) {
    parameters += ",\n    " + cType(parameter) + " " + cParameterName(parameter.name) + " /* " +
                  commentSafe(promiseComment(parameter)) + " */";
  }
  std::string arguments;
  for (std::size_t i = 0; i < kernel.parameters.size(); ++i) {
    arguments += (i == 0 ? "" : ",\n      ") + argumentExpression(kernel.parameters[i]);
  }
  // C has no zero-length arrays.
  const std::string argumentArray = kernel.parameters.empty()
                                        ? "  const attnjit_bundle_arg* attnjit_args = 0;\n"
                                        : "  const attnjit_bundle_arg attnjit_args[" + count + "] = {\n      " +
                                              arguments + "};\n";
  const std::string lookup =
      "  attnjit_bundle_kernel* attnjit_kernel = 0;\n"
      "  attnjit_bundle_status attnjit_status = attnjit_bundle_find_kernel(attnjit_bundle_handle, " +
      cStringLiteral(kernel.name) +
      ", &attnjit_kernel);\n"
      "  if (attnjit_status != ATTNJIT_BUNDLE_OK) return attnjit_status;\n";

  out += "static inline attnjit_bundle_status attnjit_check_" + kernel.name +
         "(\n    attnjit_bundle* attnjit_bundle_handle" + parameters + ") {\n" + argumentArray + lookup +
         "  return attnjit_bundle_check_args(attnjit_kernel, attnjit_args, " + count + ");\n}\n\n";
  out += "static inline attnjit_bundle_status attnjit_launch_" + kernel.name +
         "(\n    attnjit_bundle* attnjit_bundle_handle" + parameters +
         ",\n    attnjit_bundle_dim3 attnjit_grid, void* attnjit_stream) {\n" + argumentArray + lookup +
         "  return attnjit_bundle_launch(attnjit_kernel, attnjit_args, " + count +
         ", attnjit_grid, attnjit_stream);\n}\n\n";
}

}  // namespace

std::string generateLaunchHeader(const runtime::BundleManifest& manifest, const std::string& bundleHeaderInclude) {
  std::string out =
      "/* Generated by attnjit aot " + commentSafe(manifest.attnjitVersion) +
      "; do not edit. Typed launchers for the kernels of the bundle\n"
      "   in this directory: attnjit_check_<kernel> checks arguments against the kernel's\n"
      "   promises without a GPU; attnjit_launch_<kernel> checks, then launches on `attnjit_stream`\n"
      "   (a CUstream; 0: the default stream) with `attnjit_grid` blocks. Both return an\n"
      "   attnjit_bundle_status; attnjit_bundle_last_error() has the message. */\n"
      "#ifndef ATTNJIT_BUNDLE_KERNELS_H\n"
      "#define ATTNJIT_BUNDLE_KERNELS_H\n\n"
      "#include <stdint.h>\n\n"
      "#include \"" + bundleHeaderInclude + "\"\n\n";
  for (const BundleKernel& kernel : manifest.kernels) appendKernel(out, kernel);
  out += "#endif /* ATTNJIT_BUNDLE_KERNELS_H */\n";
  return out;
}

}  // namespace attnjit::compiler::cli
