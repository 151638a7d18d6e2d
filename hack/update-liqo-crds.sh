#!/usr/bin/env bash
# Regenerates, byte for byte, the copies of Liqo's API types used by the direct-connections controllers:
#  - deepcopy for go-controller/pkg/crd/liqo/{offloading,networking,core}/v1beta1 (deepcopy-gen),
#  - their CRD manifests dist/crds/{offloading,networking,core}.liqo.io_*.yaml (controller-gen).
# Tools are pinned as `tool` lines in go.mod and run with `go tool`. Called by `make generate`.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
hdr=hack/boilerplate.go.txt
pkgs=(go-controller/pkg/crd/liqo/offloading/v1beta1 go-controller/pkg/crd/liqo/networking/v1beta1 go-controller/pkg/crd/liqo/core/v1beta1)

for p in "${pkgs[@]}"; do
  go tool deepcopy-gen --go-header-file "$hdr" --output-file zz_generated.deepcopy.go "./$p"
done

rm -f dist/crds/offloading.liqo.io_*.yaml dist/crds/networking.liqo.io_*.yaml dist/crds/core.liqo.io_*.yaml
for p in "${pkgs[@]}"; do
  go tool controller-gen crd:crdVersions=v1 paths="./$p/..." output:crd:artifacts:config=dist/crds
done
