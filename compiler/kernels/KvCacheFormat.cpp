#include "compiler/kernels/KvCacheFormat.h"

#include <numeric>

namespace attnjit::compiler {

using ir::ScalarKind;

const char* kvCacheFormatName(KvCacheFormat format) {
  switch (format) {
    case KvCacheFormat::Auto: return "auto";
    case KvCacheFormat::Fp8E4M3: return "fp8_e4m3";
    case KvCacheFormat::Fp8E5M2: return "fp8_e5m2";
    case KvCacheFormat::Int8PerTokenHead: return "int8_per_token_head";
    case KvCacheFormat::Fp8PerTokenHead: return "fp8_per_token_head";
    case KvCacheFormat::Int4PerTokenHead: return "int4_per_token_head";
  }
  return "auto";
}

std::optional<KvCacheFormat> parseKvCacheFormat(const std::string& name) {
  if (name == "fp8") return KvCacheFormat::Fp8E4M3;
  for (KvCacheFormat f : {KvCacheFormat::Auto, KvCacheFormat::Fp8E4M3, KvCacheFormat::Fp8E5M2,
                          KvCacheFormat::Int8PerTokenHead, KvCacheFormat::Fp8PerTokenHead,
                          KvCacheFormat::Int4PerTokenHead})
    if (name == kvCacheFormatName(f)) return f;
  return std::nullopt;
}

const char* kvCacheFormatChoices() {
  return "auto, fp8_e4m3 (or fp8), fp8_e5m2, int8_per_token_head, fp8_per_token_head, int4_per_token_head";
}

bool isPerTokenHead(KvCacheFormat format) {
  return format == KvCacheFormat::Int8PerTokenHead || format == KvCacheFormat::Fp8PerTokenHead ||
         format == KvCacheFormat::Int4PerTokenHead;
}

bool isPerTensorFp8(KvCacheFormat format) {
  return format == KvCacheFormat::Fp8E4M3 || format == KvCacheFormat::Fp8E5M2;
}

ScalarKind kvCacheValueKind(KvCacheFormat format, ScalarKind dtype) {
  switch (format) {
    case KvCacheFormat::Auto: return dtype;
    case KvCacheFormat::Fp8E4M3:
    case KvCacheFormat::Fp8PerTokenHead: return ScalarKind::F8E4M3;
    case KvCacheFormat::Fp8E5M2: return ScalarKind::F8E5M2;
    case KvCacheFormat::Int8PerTokenHead: return ScalarKind::I8;
    case KvCacheFormat::Int4PerTokenHead: return ScalarKind::I4;
  }
  return dtype;
}

ScalarKind kvCachePointerKind(KvCacheFormat format, ScalarKind dtype) {
  return isPerTokenHead(format) ? ScalarKind::I8 : kvCacheValueKind(format, dtype);
}

int kvCacheScaleByteOffset(KvCacheFormat format, int headSize) {
  return format == KvCacheFormat::Int4PerTokenHead ? headSize / 2 : headSize;
}

int kvCacheRowElements(KvCacheFormat format, int headSize, KvScaleLayout layout) {
  if (!isPerTokenHead(format)) return headSize;
  const int valueBytes = kvCacheScaleByteOffset(format, headSize);
  return layout == KvScaleLayout::Separate ? valueBytes : valueBytes + 4;
}

int byteRowStrideDivisibility(int keyRowBytes, int valueRowBytes) {
  const int rowBytes = std::gcd(keyRowBytes, valueRowBytes);
  int divisibility = 16;
  while (rowBytes % divisibility != 0) divisibility /= 2;
  return divisibility;
}

const char* kvScaleLayoutName(KvScaleLayout layout) {
  return layout == KvScaleLayout::Separate ? "separate" : "inline";
}

std::optional<KvScaleLayout> parseKvScaleLayout(std::string_view name) {
  if (name == "inline") return KvScaleLayout::Inline;
  if (name == "separate") return KvScaleLayout::Separate;
  return std::nullopt;
}

double kvCacheQuantMax(KvCacheFormat format) {
  switch (format) {
    case KvCacheFormat::Int8PerTokenHead: return 127;
    case KvCacheFormat::Int4PerTokenHead: return 7;
    case KvCacheFormat::Fp8E4M3:
    case KvCacheFormat::Fp8PerTokenHead: return 448;
    case KvCacheFormat::Fp8E5M2: return 57344;
    case KvCacheFormat::Auto: return 0;
  }
  return 0;
}

}  // namespace attnjit::compiler
