#!/usr/bin/env bash
# fuzz.sh - fuzz bionbd's option and request parsing for SECONDS: build the
# libFuzzer harness (tests/fuzz/fuzz-session.c: the real server code, fed
# one client session per input) with clang, ASan and UBSan in build-fuzz,
# then run it on a copy of the seed corpus.  Exit status is non-zero on any
# crash, leak, timeout or out-of-memory (the input is kept under
# build-fuzz/artifacts/ and its path printed) and on a build failure.
#
#   tools/fuzz.sh 60                   what tools/test-all.sh runs
#   tools/fuzz.sh 3600 DIR             also keep the inputs it finds in DIR
#   tools/fuzz.sh 600 -seed=1          other arguments go to libFuzzer
#
# Reproduce a saved input: build-fuzz/tests/fuzz/fuzz-session FILE
set -euo pipefail
cd "$(dirname "$0")/.."

if [ $# -lt 1 ] || ! [[ $1 =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: tools/fuzz.sh SECONDS [libFuzzer arguments or corpus DIR...]" >&2
  exit 2
fi
secs=$1
shift
if ! command -v clang >/dev/null ||
  ! [ -f "$(clang -print-resource-dir)/lib/linux/libclang_rt.fuzzer-$(uname -m).a" ]; then
  echo "fuzz.sh: clang with libFuzzer not found: install the Debian packages 'clang' and 'libclang-rt-dev' (tools/install-deps.sh)" >&2
  exit 1
fi

jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DBIONBD_FUZZ=ON \
  -DBIONBD_WERROR=ON >/dev/null
cmake --build build-fuzz -j"$jobs" --target fuzz-session

work=$(mktemp -d "${TMPDIR:-/tmp}/bionbd-fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/corpus" build-fuzz/artifacts
cp tests/fuzz/corpus/* "$work/corpus/"
log=build-fuzz/fuzz.log

# Inputs up to 256 KiB: one full read of the worker's receive buffer, and
# write payloads big enough to be received straight into their buffers.
status=0
UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  build-fuzz/tests/fuzz/fuzz-session \
  -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=262144 \
  -dict=tests/fuzz/nbd.dict -artifact_prefix=build-fuzz/artifacts/ \
  -print_final_stats=1 "$@" "$work/corpus" >"$log" 2>&1 || status=$?

runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n1)
rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n1)
cov=$(sed -n 's/.* cov: \([0-9]*\) .*/\1/p' "$log" | tail -n1)
if [ "$status" -eq 0 ]; then
  echo "fuzz.sh: ${secs} s, ${runs:-?} runs (${rate:-?}/s), ${cov:-?} edges covered: no crash, leak or timeout (log: $log)"
  exit 0
fi
tail -n 60 "$log" >&2
input=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -n1)
echo "fuzz.sh: FAILED (status $status) after ${runs:-?} runs${input:+: input kept in $input, reproduce with build-fuzz/tests/fuzz/fuzz-session $input} (log: $log)" >&2
exit 1
