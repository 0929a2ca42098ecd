# Included by the top-level CMakeLists.txt when BIONBD_FUZZ is on, before
# any target is defined: every library of the tree is instrumented for
# libFuzzer (coverage, no fuzzer main) and built with ASan + UBSan, so the
# harness in this folder fuzzes the real server code.  A tree of its own
# (tools/fuzz.sh uses build-fuzz), configured with clang.
if(NOT CMAKE_C_COMPILER_ID MATCHES "Clang")
  message(FATAL_ERROR "BIONBD_FUZZ needs clang with libFuzzer (C compiler is "
    "${CMAKE_C_COMPILER_ID}): install the Debian packages 'clang' and "
    "'libclang-rt-dev' (apt-get install clang libclang-rt-dev) and configure "
    "a separate tree with -DCMAKE_C_COMPILER=clang, or run tools/fuzz.sh")
endif()
add_compile_options(-fsanitize=fuzzer-no-link,address,undefined
                    -fno-sanitize-recover=all -fno-omit-frame-pointer)
add_link_options(-fsanitize=address,undefined)
