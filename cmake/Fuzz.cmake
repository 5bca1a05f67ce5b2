# libFuzzer builds (scripts/fuzz): ATTNJIT_FUZZ=ON in a folder of their own, configured
# with clang (Debian's clang-22 and libclang-rt-22-dev). Every target then compiles with the
# fuzzer's coverage instrumentation plus ASan and UBSan, and fuzz/ adds the fuzz targets.
# The normal (g++) build never sets it.
option(ATTNJIT_FUZZ "Build the libFuzzer targets in fuzz/ (clang only; see scripts/fuzz)" OFF)
if(ATTNJIT_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "ATTNJIT_FUZZ needs clang with libFuzzer: configure with -DCMAKE_CXX_COMPILER=clang++-22")
  endif()
  # The project's GCC-only warning flags (cmake/Warnings.cmake) are unknown to clang.
  add_compile_options(-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined
                      -fno-omit-frame-pointer -Wno-unknown-warning-option)
  add_link_options(-fsanitize=address,undefined)
endif()
