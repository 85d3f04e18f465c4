#!/usr/bin/env bash
# Runs every fuzz target of the module for FUZZ_TIME (default 20s) each, so that the
# targets cannot rot and a short random search runs on every `make test`. A crasher the
# fuzzer finds is written to the package's testdata/fuzz/<Target>/ and fails the run;
# commit it there and it becomes a regression case of the plain `go test`.
set -euo pipefail
cd "$(dirname "$0")/.."
time_per_target=${FUZZ_TIME:-20s}
status=0
# Fuzz targets are found in the sources (listing them with `go test -list` would link
# every test binary of the module once more).
# Each package's test binary is built once, instrumented as `go test -fuzz` builds it, and
# run once per target as `go test -fuzz` runs it (from the package's directory, with the
# go command's fuzz cache): building it per target cost a link each time.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fuzzcache=$(go env GOCACHE)/fuzz
for dir in $(git ls-files '*_test.go' | xargs grep -l '^func Fuzz' | xargs -n1 dirname | sort -u); do
  pkg=./$dir
  importpath=$(go list "$pkg")
  bin="$work/$(echo "$dir" | tr / _).test"
  go test -c -o "$bin" -fuzz . "$pkg"
  for target in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go | sed 's/^func //' | sort -u); do
    echo "fuzz: $pkg $target ($time_per_target)"
    corpus="$dir/testdata/fuzz/$target"
    before=$(ls "$corpus" 2>/dev/null | sort || true)
    if ! (cd "$dir" && "$bin" -test.run '^$' -test.fuzz "^${target}\$" -test.fuzztime "$time_per_target" \
      -test.parallel 2 -test.paniconexit0 -test.fuzzcachedir "$fuzzcache/$importpath") >"$work/log" 2>&1; then
      after=$(ls "$corpus" 2>/dev/null | sort || true)
      # Go 1.26's fuzz coordinator can fail a run with a bare "context deadline exceeded"
      # when -fuzztime ends while a worker is busy (golang/go#75804, fixed in Go 1.27): no
      # input failed then, and none is written. Anything else fails the smoke run.
      if [ "$before" = "$after" ] && ! grep -q 'Failing input written' "$work/log" &&
        [ "$(grep -A1 -- '--- FAIL' "$work/log" | tail -n1 | tr -d '[:space:]')" = "contextdeadlineexceeded" ]; then
        echo "fuzz: $target stopped with Go's fuzztime race (no failing input), not counted as a failure"
      else
        cat "$work/log"
        status=1
      fi
    fi
  done
done
exit $status
