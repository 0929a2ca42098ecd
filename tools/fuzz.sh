#!/usr/bin/env bash
# fuzz.sh - fuzz bionbd's parsers for SECONDS in all: build the libFuzzer
# harnesses with clang, ASan and UBSan in build-fuzz, then run
# tests/fuzz/fuzz-session.c (the real server code, fed one client session
# per input, from a copy of the seed corpus) for three quarters of the
# time and tests/fuzz/fuzz-superblock.c (the member superblock parser) for
# the rest.  Exit status is non-zero on any crash, leak, timeout or
# out-of-memory (the input is kept under build-fuzz/artifacts/ and its
# path printed) and on a build failure.
#
#   tools/fuzz.sh 60                   what tools/test-all.sh runs
#   tools/fuzz.sh 3600 DIR             also keep the inputs it finds in DIR
#   tools/fuzz.sh 600 -seed=1          other arguments go to libFuzzer
#
# Reproduce a saved input: build-fuzz/tests/fuzz/fuzz-session FILE (or
# fuzz-superblock FILE)
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
cmake --build build-fuzz -j"$jobs" --target fuzz-session fuzz-superblock

work=$(mktemp -d "${TMPDIR:-/tmp}/bionbd-fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/corpus" "$work/sb-corpus" build-fuzz/artifacts
cp tests/fuzz/corpus/* "$work/corpus/"
cp tests/fuzz/sb-corpus/* "$work/sb-corpus/"

# Three quarters of the time for the session (the server's whole input
# surface), the rest (at least 5 s) for the superblock parser.
sb_secs=$((secs / 4 > 5 ? secs / 4 : 5))
session_secs=$((secs - sb_secs > 5 ? secs - sb_secs : 5))

# fuzz NAME SECONDS LOG ARGS...: run build-fuzz/tests/fuzz/NAME; print one
# summary line, or the log's tail and where the crashing input is.
fuzz() {
  local name=$1 t=$2 log=$3 status=0 runs rate cov input
  shift 3
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    "build-fuzz/tests/fuzz/$name" -max_total_time="$t" -timeout=10 \
    -rss_limit_mb=2048 -artifact_prefix=build-fuzz/artifacts/ \
    -print_final_stats=1 "$@" >"$log" 2>&1 || status=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n1)
  cov=$(sed -n 's/.* cov: \([0-9]*\) .*/\1/p' "$log" | tail -n1)
  if [ "$status" -eq 0 ]; then
    echo "fuzz.sh: $name ${t} s, ${runs:-?} runs (${rate:-?}/s), ${cov:-?} edges covered: no crash, leak or timeout (log: $log)"
    return 0
  fi
  tail -n 60 "$log" >&2
  input=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -n1)
  echo "fuzz.sh: $name FAILED (status $status) after ${runs:-?} runs${input:+: input kept in $input, reproduce with build-fuzz/tests/fuzz/$name $input} (log: $log)" >&2
  return 1
}

# Inputs up to 256 KiB: one full read of the worker's receive buffer, and
# write payloads big enough to be received straight into their buffers.
status=0
fuzz fuzz-session "$session_secs" build-fuzz/fuzz.log -max_len=262144 \
  -dict=tests/fuzz/nbd.dict "$@" "$work/corpus" || status=1
# A superblock is 4 KiB; a little more tries the short-block paths too.
fuzz fuzz-superblock "$sb_secs" build-fuzz/fuzz-superblock.log \
  -max_len=4200 "$work/sb-corpus" || status=1
exit "$status"
