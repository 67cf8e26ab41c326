#!/usr/bin/env bash
# Builds the real Kubernetes parts that tests and benchmarks run against (kube-apiserver,
# kube-controller-manager, kube-scheduler, etcd, kwok) and the KubeRay operator into cache folders
# outside the checkout, and does nothing when they are already there. The versions are the ones
# pinned in go.mod, kwok/go.mod and kuberay/go.mod; each cache folder is named after its versions,
# so a version change builds anew, and the operator's own folder keeps a change of it from
# rebuilding Kubernetes (and the other way round).
#
#   hack/kube/build.sh          build both if needed, then print the folder holding the Kubernetes binaries
#   hack/kube/build.sh kube     the Kubernetes binaries only; prints their folder
#   hack/kube/build.sh kuberay  the KubeRay operator only; prints its folder (the binary `ray-operator`,
#                               the ray.io CRDs and the operator's ClusterRole, as the module ships them)
#   AI_SCHEDULER_KUBE_DIR=...      use this folder instead of the default Kubernetes cache folder
#   AI_SCHEDULER_KUBERAY_DIR=...   use this folder instead of the default operator cache folder
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
what="${1:-all}"
case "$what" in all | kube | kuberay) ;; *) echo "usage: hack/kube/build.sh [kube|kuberay]" >&2; exit 2 ;; esac

version() { # version of module $1 as pinned in go.mod $2
    awk -v m="$1" '$1 == m && $2 ~ /^v/ {print $2; exit}' "$2"
}
cache="${XDG_CACHE_HOME:-$HOME/.cache}/ai-scheduler"
kube_version=$(version k8s.io/kubernetes "$here/go.mod")
etcd_version=$(version go.etcd.io/etcd/server/v3 "$here/go.mod")
kwok_version=$(version sigs.k8s.io/kwok "$here/kwok/go.mod")
kuberay_module=github.com/ray-project/kuberay/ray-operator
kuberay_version=$(version "$kuberay_module" "$here/kuberay/go.mod")
kube_dir="${AI_SCHEDULER_KUBE_DIR:-$cache/kube-$kube_version-etcd-$etcd_version-kwok-$kwok_version}"
kuberay_dir="${AI_SCHEDULER_KUBERAY_DIR:-$cache/kuberay-$kuberay_version}"
kube_binaries=(kube-apiserver kube-controller-manager kube-scheduler etcd kwok)
# What the operator needs besides its binary, copied from the module: its CRDs (the operator watches all
# three kinds, so all three must be served) and the ClusterRole it ships for its ServiceAccount.
kuberay_files=(ray-operator ray.io_rayclusters.yaml ray.io_rayjobs.yaml ray.io_rayservices.yaml role.yaml)

stages=()  # build folders, removed on exit whatever happens
trap 'for s in "${stages[@]}"; do rm -rf "$s"; done' EXIT

complete() { # folder $1 holds every file named after it
    local dir="$1" f
    shift
    for f in "$@"; do [ -s "$dir/$f" ] || return 1; done
}

need_go() {
    command -v go >/dev/null 2>&1 && return 0
    echo "hack/kube/build.sh: no Go toolchain on PATH: install Go 1.26 or newer to build kube-apiserver," \
        "kube-controller-manager, kube-scheduler, etcd, kwok and the KubeRay operator for the real-Kubernetes tests." >&2
    exit 3
}

download() { # module folder $1, what it builds $2: every module it needs, with one clear message when refused
    local log
    log=$(cd "$1" && go mod download 2>&1) && return 0
    echo "hack/kube/build.sh: cannot download the Go modules that $2 needs: the Go module proxy" \
        "($(go env GOPROXY)) is unreachable or refused one. What go said:" >&2
    echo "$log" | grep -E 'not available|refused|forbidden|not found|410|403|404|dial|timeout|error' | head -20 >&2 \
        || echo "$log" | tail -20 >&2
    exit 4
}

build_kube() {
    if complete "$kube_dir" "${kube_binaries[@]}"; then return 0; fi
    need_go
    download "$here" "Kubernetes $kube_version and etcd $etcd_version"
    download "$here/kwok" "kwok $kwok_version"
    echo "hack/kube/build.sh: building Kubernetes $kube_version, etcd $etcd_version and kwok $kwok_version into $kube_dir" >&2
    mkdir -p "$kube_dir"
    local stage pkg ldflags
    stage=$(mktemp -d "$kube_dir/.build.XXXXXX")
    stages+=("$stage")
    pkg=k8s.io/component-base/version
    ldflags="-s -w -X $pkg.gitVersion=$kube_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$(echo "$kube_version" | cut -d. -f2)"
    ldflags="$ldflags -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
    # One invocation for the four, so that the packages they share compile once.
    (cd "$here" && CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$stage/" ./cmd/...)
    (cd "$here/kwok" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$stage/" ./cmd/kwok)
    for b in "${kube_binaries[@]}"; do mv "$stage/$b" "$kube_dir/$b"; done
}

build_kuberay() {
    if complete "$kuberay_dir" "${kuberay_files[@]}"; then return 0; fi
    need_go
    download "$here/kuberay" "the KubeRay operator $kuberay_version"
    echo "hack/kube/build.sh: building the KubeRay operator $kuberay_version into $kuberay_dir" >&2
    mkdir -p "$kuberay_dir"
    local stage src
    stage=$(mktemp -d "$kuberay_dir/.build.XXXXXX")
    stages+=("$stage")
    # The operator's main package is its module's root, a `tool` of our module (kuberay/go.mod).
    (cd "$here/kuberay" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$stage/ray-operator" "$kuberay_module")
    src=$(cd "$here/kuberay" && go list -m -f '{{.Dir}}' "$kuberay_module")
    cp "$src"/config/crd/bases/ray.io_{rayclusters,rayjobs,rayservices}.yaml "$src/config/rbac/role.yaml" "$stage/"
    chmod u+w "$stage"/*.yaml
    for f in "${kuberay_files[@]}"; do mv "$stage/$f" "$kuberay_dir/$f"; done
}

case "$what" in
    kuberay) build_kuberay; echo "$kuberay_dir" ;;
    kube) build_kube; echo "$kube_dir" ;;
    all) build_kube; build_kuberay; echo "$kube_dir" ;;
esac
