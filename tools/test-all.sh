#!/usr/bin/env bash
# test-all.sh - the README's test command: install, build with -Werror, run
# the whole ctest suite, then rebuild with ASan/UBSan and run the suite
# again under the sanitizers, then the tests labelled "tsan" (units and
# servers with threads of their own) under ThreadSanitizer, then fuzz the
# handshake and request parsing and the superblock parser for 60 s
# (tools/fuzz.sh).  Exit status is non-zero if anything failed.
set -euo pipefail
cd "$(dirname "$0")/.."

tools/install-deps.sh

jobs=$(nproc 2>/dev/null || echo 2)
status=0

cmake -S . -B build -DBIONBD_WERROR=ON
cmake --build build -j"$jobs"
ctest --test-dir build --output-on-failure -j"$jobs" || status=1

cmake -S . -B build-asan -DBIONBD_WERROR=ON -DBIONBD_SANITIZE=ON \
  -DCMAKE_BUILD_TYPE=Debug
cmake --build build-asan -j"$jobs"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan --output-on-failure -j"$jobs" -L asan || status=1

cmake -S . -B build-tsan -DBIONBD_WERROR=ON -DBIONBD_TSAN=ON
cmake --build build-tsan -j"$jobs"
TSAN_OPTIONS=second_deadlock_stack=1 \
  ctest --test-dir build-tsan --output-on-failure -j"$jobs" -L tsan || status=1

tools/fuzz.sh 60 || status=1

exit $status
