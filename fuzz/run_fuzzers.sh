#!/usr/bin/env bash
# Runs every libFuzzer harness of a fuzz build for SECONDS each, from the seed corpus in
# fuzz/corpus/<harness> (copied into BUILD/corpus, which grows there; the repository's seeds are
# never written). Prints executions per harness; exits 1 if any harness crashed, timed out,
# ran out of memory or a sanitizer reported (the input is kept in BUILD/artifacts).
# Usage: fuzz/run_fuzzers.sh BUILD SECONDS   (from the repository root)
set -u
BUILD=${1:?usage: run_fuzzers.sh BUILD SECONDS}
SECONDS_EACH=${2:?usage: run_fuzzers.sh BUILD SECONDS}
HARNESSES="model_toml cluster_toml hf_config plan_json profile_csv import"
mkdir -p "$BUILD/artifacts" "$BUILD/logs"
failed=0
printf '%-14s %12s %10s  %s\n' harness executions exec/s result
for h in $HARNESSES; do
  corpus="$BUILD/corpus/$h"
  mkdir -p "$corpus"
  cp -n fuzz/corpus/"$h"/* "$corpus"/ 2>/dev/null
  log="$BUILD/logs/$h.log"
  # -timeout: one input taking longer is a finding; -rss_limit_mb: so is a memory blow-up.
  # Harnesses that read files write them under TMPDIR: inside BUILD, removed afterwards
  # (libFuzzer may exit without running destructors).
  scratch="$BUILD/tmp/$h"
  rm -rf "$scratch" && mkdir -p "$scratch"
  TMPDIR="$scratch" "$BUILD/fuzz/fuzz_$h" -max_total_time="$SECONDS_EACH" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$BUILD/artifacts/$h-" "$corpus" >"$log" 2>&1
  code=$?
  rm -rf "$scratch"
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
  rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
  if [ "$code" -eq 0 ]; then
    result=ok
  else
    result="FAILED (exit $code; log $log)"
    failed=1
    grep -E 'ERROR|SUMMARY|Test unit written|runtime error' "$log" | head -5 | sed 's/^/    /'
  fi
  printf '%-14s %12s %10s  %s\n' "$h" "${runs:-?}" "${rate:-?}" "$result"
done
exit $failed
