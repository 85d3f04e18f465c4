#!/usr/bin/env bash
# Builds the binaries of a local Kubernetes control plane from the Go modules pinned in
# tools/go.mod (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, kwok)
# into bin/k8s. Cold, this takes about 20 minutes on 2 cores; the result is kept in a cache
# outside the work tree, keyed by the tool module and the Go version, so a second clone on the
# same machine (CI) only copies it, and an up-to-date bin/k8s makes this a no-op.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
out="$root/bin/k8s"
binaries=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kwok)
# The Kubernetes binaries say the release they are built from, as a release build does
# (`kubectl version`, the API server's /version): without it they report v0.0.0-master.
kube_version=$(cd "$root/tools" && go list -m -f '{{.Version}}' k8s.io/kubernetes)
kube_minor=$(echo "$kube_version" | cut -d. -f2)
pkg=k8s.io/component-base/version
kube_ldflags="-s -w -X $pkg.gitVersion=$kube_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$kube_minor -X $pkg.gitTreeState=clean"
key=$( (cat "$root/tools/go.mod" "$root/tools/go.sum"; go version; echo "$kube_ldflags") | sha256sum | cut -c1-16)
cache_root="${CONVERGE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/converge}"
cache="$cache_root/k8s-$key"

complete() {
  local dir=$1
  for b in "${binaries[@]}"; do [ -x "$dir/$b" ] || return 1; done
  [ -s "$dir/kwok-stages.yaml" ]
}

if [ "$(cat "$out/.stamp" 2>/dev/null)" = "$key" ] && complete "$out"; then
  echo "control plane in bin/k8s is up to date ($key)"
  exit 0
fi

if ! complete "$cache"; then
  echo "building the control plane from Go modules into $cache (about 20 minutes cold on 2 cores)"
  tmp="$cache.tmp.$$"
  rm -rf "$tmp"
  mkdir -p "$tmp"
  trap 'rm -rf "$tmp"' EXIT
  start=$(date +%s)
  (
    cd "$root/tools"
    export GOFLAGS=-mod=readonly
    go build -ldflags='-s -w' -o "$tmp/etcd" go.etcd.io/etcd/server/v3
    for cmd in kube-apiserver kube-controller-manager kube-scheduler kubectl; do
      go build -ldflags="$kube_ldflags" -o "$tmp/$cmd" "k8s.io/kubernetes/cmd/$cmd"
    done
    go build -ldflags='-s -w' -o "$tmp/kwok" sigs.k8s.io/kwok/cmd/kwok
    # kwok's own Stage definitions (fake node and pod lifecycles), from its module.
    stages=$(go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)/kustomize/stage
    for f in node/fast/node-initialize.yaml node/heartbeat/node-heartbeat.yaml \
      pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
      echo "---"
      cat "$stages/$f"
    done > "$tmp/kwok-stages.yaml"
  )
  rm -rf "$cache"
  mv "$tmp" "$cache"
  trap - EXIT
  echo "built in $(( $(date +%s) - start ))s"
fi

mkdir -p "$out"
for b in "${binaries[@]}" kwok-stages.yaml; do
  cp -f "$cache/$b" "$out/$b.new"
  mv -f "$out/$b.new" "$out/$b"
done
echo "$key" > "$out/.stamp"
echo "control plane copied to bin/k8s ($key)"
