#!/usr/bin/env bash
# Build the test control plane from unmodified upstream Go modules:
#   bin/etcd  (go.etcd.io/etcd/server/v3)
#   bin/kube  (k8s.io/kubernetes: `kube apiserver|scheduler|controller-manager ...`)
#   bin/kwok  (sigs.k8s.io/kwok/cmd/kwok, built as a `tool` of the k8s module: its k8s.io/* modules
#              are the ones of the multicall, so the packages compiled for one serve the other)
#   bin/karpenter and bin/karpenter-crds/ (sigs.k8s.io/karpenter/kwok: Karpenter with its kwok
#             cloud provider, and the CRD files of that same module version)
# Idempotent: Go's build cache makes a rebuild with no change take seconds. Prints the bin dir last.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
bin="$here/bin"
mkdir -p "$bin"
export GOFLAGS="${GOFLAGS:--mod=mod}"
export CGO_ENABLED=0

k8s_version="$(awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v/ {print $2; exit} $1 == "require" && $2 == "k8s.io/kubernetes" {print $3; exit}' "$here/k8s/go.mod")"
[ -n "$k8s_version" ] || { echo "build.sh: cannot read the k8s.io/kubernetes version from k8s/go.mod" >&2; exit 1; }
k8s_minor="$(echo "$k8s_version" | cut -d. -f2)"
pkg=k8s.io/component-base/version
ldflags="-s -w -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$k8s_minor"
ldflags="$ldflags -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
ldflags="$ldflags -X k8s.io/client-go/pkg/version.gitVersion=$k8s_version"

# One Go build at a time on this machine: parallel cold builds of the same modules only
# compete for the cores (Go's build cache is shared and safe to use concurrently).
exec 9>"${TMPDIR:-/tmp}/nebari-colocate-go-build.lock"
flock 9

kwok_version="$(awk '$1 == "sigs.k8s.io/kwok" && $2 ~ /^v/ {print $2; exit}' "$here/k8s/go.mod")"

build() {  # build NAME MODULE_DIR PACKAGE LDFLAGS; says how long it took on stderr
  local t0
  t0=$(date +%s)
  (cd "$here/$2" && go build -trimpath -ldflags "$4" -o "$bin/$1" "$3")
  echo "build.sh: $1 in $(( $(date +%s) - t0 ))s" >&2
}

start=$(date +%s)
build etcd etcd . "-s -w"
build kube k8s . "$ldflags"
build kwok k8s sigs.k8s.io/kwok/cmd/kwok "-s -w"
echo "control plane built in $(( $(date +%s) - start ))s: $bin/etcd $bin/kube ($k8s_version)" \
  "$bin/kwok ($kwok_version)" >&2

# Karpenter: its go.mod needs go >= 1.26.9, newer than the Go this machine may have; GOTOOLCHAIN
# makes the go command fetch exactly go1.27.3 from the module proxy (once; it is cached).
start=$(date +%s)
karpenter_version="$(awk '$1 == "require" && $2 == "sigs.k8s.io/karpenter" {print $3; exit}' "$here/karpenter/go.mod")"
[ -n "$karpenter_version" ] || { echo "build.sh: cannot read the sigs.k8s.io/karpenter version from karpenter/go.mod" >&2; exit 1; }
(
  cd "$here/karpenter"
  export GOTOOLCHAIN=go1.27.3
  go build -trimpath -ldflags "-s -w -X sigs.k8s.io/karpenter/pkg/operator.Version=$karpenter_version" \
    -o "$bin/karpenter" sigs.k8s.io/karpenter/kwok
  # The CRDs the binary expects, from the same module version (module files are read-only).
  module_dir="$(go list -m -f '{{.Dir}}' sigs.k8s.io/karpenter)"
  mkdir -p "$bin/karpenter-crds"
  install -m 0644 "$module_dir"/pkg/apis/crds/*.yaml "$module_dir"/kwok/apis/crds/*.yaml "$bin/karpenter-crds/"
)
echo "karpenter built in $(( $(date +%s) - start ))s: $bin/karpenter ($karpenter_version)" >&2
echo "$bin"
