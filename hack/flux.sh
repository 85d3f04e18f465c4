#!/usr/bin/env bash
# Builds Flux's source-controller, kustomize-controller and helm-controller from their Go
# modules, pinned in tools/flux/<controller>/go.mod (wrapper modules carrying the replace
# directives Flux's own go.mod needs), into bin/flux with Flux's CRDs: the baseline of
# `make bench` (BENCH_BASELINES=flux). Cold, this takes several minutes on 2 cores; the
# result is kept in a cache outside the work tree, keyed by the wrapper modules and the Go
# version. Nothing else needs it: `make test` never builds Flux.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
out="$root/bin/flux"
controllers=(source-controller kustomize-controller helm-controller)
key=$( (for c in "${controllers[@]}"; do cat "$root/tools/flux/$c/go.mod" "$root/tools/flux/$c/go.sum"; done; go version) | sha256sum | cut -c1-16)
cache_root="${CONVERGE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/converge}"
cache="$cache_root/flux-$key"

complete() {
  local dir=$1
  for c in "${controllers[@]}"; do [ -x "$dir/$c" ] || return 1; done
  ls "$dir"/crds/*.yaml >/dev/null 2>&1
}

if [ "$(cat "$out/.stamp" 2>/dev/null)" = "$key" ] && complete "$out"; then
  echo "Flux in bin/flux is up to date ($key)"
  exit 0
fi

if ! complete "$cache"; then
  echo "building Flux's controllers from Go modules into $cache (several minutes cold)"
  tmp="$cache.tmp.$$"
  rm -rf "$tmp"
  mkdir -p "$tmp/crds"
  trap 'rm -rf "$tmp"' EXIT
  start=$(date +%s)
  for c in "${controllers[@]}"; do
    (
      cd "$root/tools/flux/$c"
      export GOFLAGS=-mod=readonly
      go build -trimpath -ldflags='-s -w' -o "$tmp/$c" "github.com/fluxcd/$c"
      cp "$(go list -m -f '{{.Dir}}' "github.com/fluxcd/$c")"/config/crd/bases/*.yaml "$tmp/crds/"
    )
  done
  chmod u+w "$tmp"/crds/*.yaml
  rm -rf "$cache"
  mkdir -p "$cache_root"
  mv "$tmp" "$cache"
  trap - EXIT
  echo "built Flux in $(( $(date +%s) - start )) s"
fi

rm -rf "$out"
mkdir -p "$out"
cp -r "$cache"/. "$out"/
echo "$key" > "$out/.stamp"
echo "Flux in bin/flux ($key)"
