# Project-wide warning flags; ATTNJIT_WERROR (on in scripts/build and CI) makes them errors.
add_compile_options(-Wall -Wextra -Wpedantic -Wshadow=local -Wno-unused-parameter)
# GCC 12 reports false -Wrestrict, -Wstringop-overflow, -Wmaybe-uninitialized and
# -Wfree-nonheap-object
# positives inside libstdc++ string concatenation and std::variant moves at -O2
# (GCC bugs 105329, 105651); they say nothing about our code.
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  add_compile_options(-Wno-restrict -Wno-stringop-overflow -Wno-maybe-uninitialized -Wno-free-nonheap-object)
endif()
if(ATTNJIT_WERROR)
  add_compile_options(-Werror)
endif()
if(ATTNJIT_SANITIZE)
  # UBSan's vptr check needs the typeinfo of every polymorphic class a test
  # calls through; libattnjit.so exports typeinfo only where a class has a key
  # function (weak, vague-linkage typeinfo stays inside the library), so the
  # check would demand symbols the shared library does not offer.
  add_compile_options(-fsanitize=address,undefined -fno-sanitize=vptr -fno-omit-frame-pointer
                      -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
endif()
