#!/usr/bin/env bash
# Installs the built tree into a temporary prefix (cmake --install, no rebuild),
# checks what landed there -- libattnjit.so with the C API exported,
# libattnjit_runtime.so without LLVM, the public headers, the CMake package --
# then configures, builds and runs examples/embed against it with
# find_package(attnjit), as an embedding project would.
# Usage: install_and_embed.sh BUILD_DIR SOURCE_DIR GENERATOR MAKE_PROGRAM C_COMPILER CXX_COMPILER VERSION
set -euo pipefail

build="${1:?usage: install_and_embed.sh BUILD_DIR SOURCE_DIR GENERATOR MAKE_PROGRAM C_COMPILER CXX_COMPILER}"
source_dir="$2"
generator="$3"
make_program="$4"
c_compiler="$5"
cxx_compiler="$6"

version="${7:?usage: install_and_embed.sh ... VERSION}"
soversion="${version%.*}"

work="$(mktemp -d "${TMPDIR:-/tmp}/attnjit-install.XXXXXX")"
trap 'rm -rf "$work"' EXIT
prefix="$work/prefix"
fail() {
  echo "install_and_embed: $*" >&2
  exit 1
}

cmake --install "$build" --prefix "$prefix" >"$work/install.log" || { cat "$work/install.log"; fail "cmake --install failed"; }

for file in lib/libattnjit.so lib/libattnjit_runtime.so bin/attnjit include/attnjit/attnjit.h \
  include/attnjit/jit.hpp include/attnjit/compiler/ops/PagedAttentionOp.h \
  include/attnjit/runtime/Driver.h lib/cmake/attnjit/attnjitConfig.cmake \
  lib/cmake/attnjit/attnjitConfigVersion.cmake; do
  [ -f "$prefix/$file" ] || fail "the install lacks $file"
done
# Nothing but attnjit/ under include/: no generic top-level names (runtime/, ir/).
others="$(find "$prefix/include" -mindepth 1 -maxdepth 1 ! -name attnjit -print)"
[ -z "$others" ] || fail "the install puts more than attnjit/ under include/: $others"

# Versioned libraries: the SONAME carries major.minor, the files the full version.
for library in libattnjit libattnjit_runtime; do
  soname="$(readelf -d "$prefix/lib/$library.so" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')"
  [ "$soname" = "$library.so.$soversion" ] || fail "$library.so has SONAME '$soname', expected $library.so.$soversion"
  [ -f "$prefix/lib/$library.so.$version" ] || fail "the install lacks $library.so.$version"
  symbols="$(readelf -S "$prefix/lib/$library.so.$version")"
  ! grep -q '\.symtab' <<<"$symbols" || fail "$library.so is installed unstripped"
done

# The public headers compile with -I <prefix>/include alone, each on its own.
for header in attnjit/jit.hpp attnjit/attnjit.h attnjit/runtime/Bundle.h attnjit/runtime/DeviceBuffer.h; do
  printf '#include "%s"\nint main() { return 0; }\n' "$header" >"$work/include_check.cpp"
  "$cxx_compiler" -std=c++20 -fsyntax-only -I "$prefix/include" "$work/include_check.cpp" 2>"$work/include_check.log" ||
    { cat "$work/include_check.log"; fail "$header does not compile with -I $prefix/include alone"; }
done

# No validation code is installed: the float64 references and problem runners
# are linked by the CLI and the tests only.
validation_headers="$(find "$prefix/include" -path '*validation*' -print)"
[ -z "$validation_headers" ] || fail "the install has validation headers: $validation_headers"

# The runtime library holds no LLVM (nor yaml-cpp, the compiler or the IR), in
# its symbol table or its dependencies.
runtime_lib="$prefix/lib/libattnjit_runtime.so"
llvm_symbols="$(nm -C "$runtime_lib" 2>/dev/null | grep -cE ' (llvm::|LLVM|YAML::|attnjit::codegen::|attnjit::compiler::|attnjit::ir::)' || true)"
[ "$llvm_symbols" -eq 0 ] || fail "libattnjit_runtime.so has $llvm_symbols LLVM, yaml-cpp, compiler or IR symbols"
# A stripped library has no symbol table: LLVM's fatal-error text gives it away too.
llvm_text="$(strings "$runtime_lib" | grep -c 'LLVM ERROR' || true)"
[ "$llvm_text" -eq 0 ] || fail "libattnjit_runtime.so contains LLVM's error strings"
# (Tool output goes through variables: `tool | grep -q` fails under pipefail
# when grep stops reading early.)
dynamic="$(readelf -d "$runtime_lib")"
! grep -qiE 'NEEDED.*(llvm|yaml)' <<<"$dynamic" || fail "libattnjit_runtime.so needs LLVM or yaml-cpp"
runtime_kib=$(($(stat -c %s "$runtime_lib") / 1024))
exports="$(nm -D --defined-only "$prefix/lib/libattnjit.so")"
grep -q ' attnjit_jit_create$' <<<"$exports" || fail "libattnjit.so does not export attnjit_jit_create"

cmake -S "$source_dir/examples/embed" -B "$work/build" -G "$generator" -DCMAKE_MAKE_PROGRAM="$make_program" \
  -DCMAKE_C_COMPILER="$c_compiler" -DCMAKE_CXX_COMPILER="$cxx_compiler" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" >"$work/configure.log" 2>&1 || { cat "$work/configure.log"; fail "configuring examples/embed failed"; }
cmake --build "$work/build" >"$work/build.log" 2>&1 || { cat "$work/build.log"; fail "building examples/embed failed"; }

# The examples find the libraries in the prefix (the imported targets' RPATH),
# not in the build tree.
for program in embed_cpp embed_c embed_runtime_only; do
  "$work/build/$program" || fail "$program failed"
done
"$work/build/embed_c" "$source_dir/specs/merge_attn_states.yaml" merge_attn_states_f16_h4_d64_lse ||
  fail "embed_c with a spec file failed"
loaded="$(ldd "$work/build/embed_cpp")"
grep -q "$prefix/lib/libattnjit.so.$soversion" <<<"$loaded" || fail "embed_cpp does not load the installed libattnjit.so"

# The installed Python package finds the installed library by itself.
if command -v python3 >/dev/null; then
  found="$(cd "$work" && env -u ATTNJIT_LIBRARY PYTHONDONTWRITEBYTECODE=1 PYTHONPATH="$prefix/share/attnjit/python" \
    python3 -c 'import attnjit; print(attnjit.library_path)')" || fail "the installed Python package does not import"
  [ "$found" = "$prefix/lib/libattnjit.so" ] || fail "the installed Python package loaded $found"
else
  echo "install_and_embed: python3 not found: the installed Python package is not checked"
fi

echo "install_and_embed: installed, built and ran examples/embed against $prefix (libattnjit_runtime.so: ${runtime_kib} KiB, no LLVM)"
