#!/usr/bin/env bash
# Checks what libattnjit.so shows the dynamic linker: it exports the attnjit API
# and nothing else (cmake/attnjit.map) -- not the LLVM, zlib and zstd linked
# inside it, nor yaml-cpp code instantiated from its headers, nor validation
# code -- and it loads no shared LLVM, zlib or zstd library.
# Usage: check_exports.sh path/to/libattnjit.so
set -euo pipefail

library="${1:?usage: check_exports.sh path/to/libattnjit.so}"
failures=0
fail() {
  echo "check_exports: $library: $*" >&2
  failures=$((failures + 1))
}

exports="$(nm -D --defined-only -C "$library")"
# nm lines are "ADDRESS TYPE NAME"; keep the names.
names="$(sed -E 's/^[0-9a-f]+ [A-Za-z] //' <<<"$exports" | sort -u)"
[ -n "$names" ] || fail "exports no symbols at all"

# LLVM's C++ (llvm::) and C (LLVM*) symbols and yaml-cpp's (YAML::), also as the
# subject of "vtable for ..." and the like or after a template's return type; an
# attnjit function that merely takes an llvm:: parameter is attnjit's.
forbidden="$(grep -E '^([^(]* )?(llvm::|LLVM|YAML::)' <<<"$names" || true)"
if [ -n "$forbidden" ]; then
  fail "exports $(wc -l <<<"$forbidden") LLVM or yaml-cpp symbols, e.g.:"
  awk 'NR <= 5' <<<"$forbidden" >&2
fi

# Every export is attnjit's: its C++ namespace, its RTTI and vtables, or the C API.
foreign="$(grep -vE '^(attnjit::|typeinfo for attnjit::|typeinfo name for attnjit::|vtable for attnjit::|attnjit_)' <<<"$names" || true)"
if [ -n "$foreign" ]; then
  fail "exports $(wc -l <<<"$foreign") symbols outside attnjit, e.g.:"
  awk 'NR <= 5' <<<"$foreign" >&2
fi

# The validation harness (compiler/validation: float64 references, problems,
# runners) is linked by the CLI and the tests, never into the library.
validation="$(grep -E '^([^(]* )?attnjit::validation::' <<<"$names" || true)"
if [ -n "$validation" ]; then
  fail "exports $(wc -l <<<"$validation") validation symbols, e.g.:"
  awk 'NR <= 5' <<<"$validation" >&2
fi

grep -q '^attnjit::compiler::compileKernel(' <<<"$names" || fail "does not export attnjit::compiler::compileKernel"
grep -qx 'attnjit_version' <<<"$names" || fail "does not export attnjit_version"

# Shared libraries it may load: the C and C++ runtimes, present on every target
# machine; the sanitizer runtimes in an ATTNJIT_SANITIZE build; and yaml-cpp,
# whose Debian archive cannot go into a shared library, so the bundle carries
# it next to libattnjit.so (cmake/StaticDependencies.cmake).
# LLVM, zlib and zstd must be inside; anything else (libz3, libxml2) is a leak.
needed="$(readelf -d "$library" | sed -nE 's/.*\(NEEDED\).*\[(.*)\]/\1/p')"
unexpected="$(grep -vE '^(libc|libm|libgcc_s|libstdc\+\+|ld-linux-x86-64|libasan|libubsan)\.so\.[0-9]+$|^libyaml-cpp\.so\.[0-9.]+$' <<<"$needed" || true)"
[ -z "$unexpected" ] || fail "needs shared libraries it should not: $(tr '\n' ' ' <<<"$unexpected")"

if [ "$failures" -ne 0 ]; then
  exit 1
fi
echo "check_exports: $library: $(wc -l <<<"$names") attnjit symbols exported; needs $(tr '\n' ' ' <<<"$needed")"
