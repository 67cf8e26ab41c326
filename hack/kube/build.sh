#!/usr/bin/env bash
# Builds the real Kubernetes parts that tests and benchmarks run against (kube-apiserver,
# kube-controller-manager, kube-scheduler, etcd, kwok) into a cache folder outside the checkout,
# and does nothing when they are already there. The versions are the ones pinned in go.mod and
# kwok/go.mod; the cache folder is named after them, so a version change builds anew.
#
#   hack/kube/build.sh          build if needed, then print the folder holding the binaries
#   AI_SCHEDULER_KUBE_DIR=...   use this folder instead of the default cache folder
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"

version() { # version of module $1 as pinned in go.mod $2
    awk -v m="$1" '$1 == m && $2 ~ /^v/ {print $2; exit}' "$2"
}
kube_version=$(version k8s.io/kubernetes "$here/go.mod")
etcd_version=$(version go.etcd.io/etcd/server/v3 "$here/go.mod")
kwok_version=$(version sigs.k8s.io/kwok "$here/kwok/go.mod")
dir="${AI_SCHEDULER_KUBE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ai-scheduler/kube-$kube_version-etcd-$etcd_version-kwok-$kwok_version}"
binaries=(kube-apiserver kube-controller-manager kube-scheduler etcd kwok)

complete=1
for b in "${binaries[@]}"; do [ -x "$dir/$b" ] || complete=0; done
if [ "$complete" = 1 ]; then
    echo "$dir"
    exit 0
fi

if ! command -v go >/dev/null 2>&1; then
    echo "hack/kube/build.sh: no Go toolchain on PATH: install Go 1.26 or newer to build kube-apiserver," \
        "kube-controller-manager, kube-scheduler, etcd and kwok for the real-Kubernetes tests." >&2
    exit 3
fi
proxy_check() {
    # One clear message when the module proxy cannot be reached, instead of a page of download errors.
    (cd "$here" && go mod download k8s.io/kubernetes >/dev/null 2>&1) && return 0
    echo "hack/kube/build.sh: cannot download k8s.io/kubernetes $kube_version: the Go module proxy" \
        "($(go env GOPROXY)) is unreachable or refused it. Run 'cd hack/kube && go mod download' to see why." >&2
    exit 4
}
proxy_check

echo "hack/kube/build.sh: building Kubernetes $kube_version, etcd $etcd_version and kwok $kwok_version into $dir" >&2
mkdir -p "$dir"
stage=$(mktemp -d "$dir/.build.XXXXXX")
trap 'rm -rf "$stage"' EXIT
pkg=k8s.io/component-base/version
ldflags="-s -w -X $pkg.gitVersion=$kube_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$(echo "$kube_version" | cut -d. -f2)"
ldflags="$ldflags -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
# One invocation for the four, so that the packages they share compile once.
(cd "$here" && CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$stage/" ./cmd/...)
(cd "$here/kwok" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$stage/" ./cmd/kwok)
for b in "${binaries[@]}"; do mv "$stage/$b" "$dir/$b"; done
echo "$dir"
