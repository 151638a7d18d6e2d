#!/usr/bin/env bash
# Regenerates every generated file in the repo, byte for byte:
#  - deepcopy, typed clientset, listers and informers for k8s.ovn.org/v1 (k8s.io/code-generator),
#  - the CRD manifest dist/crds/k8s.ovn.org_egressips.yaml (controller-gen),
#  - the libovsdb NB model go-controller/pkg/nbdb from ovn-nb.ovsschema (modelgen).
# Tools are pinned as `tool` lines in go.mod and run with `go tool`.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
mod=github.com/ovn-egressip/ovn-egressip
hdr=hack/boilerplate.go.txt
api=go-controller/pkg/crd/egressip/v1
out=go-controller/pkg/crd/egressip/v1/apis

go tool deepcopy-gen --go-header-file "$hdr" --output-file zz_generated.deepcopy.go "./$api"

rm -rf "$out"
go tool client-gen --go-header-file "$hdr" --clientset-name versioned \
  --input-base "" --input "$mod/$api" \
  --output-dir "$out/clientset" --output-pkg "$mod/$out/clientset"
go tool lister-gen --go-header-file "$hdr" \
  --output-dir "$out/listers" --output-pkg "$mod/$out/listers" "$mod/$api"
go tool informer-gen --go-header-file "$hdr" \
  --versioned-clientset-package "$mod/$out/clientset/versioned" \
  --listers-package "$mod/$out/listers" \
  --output-dir "$out/informers" --output-pkg "$mod/$out/informers" "$mod/$api"

go tool controller-gen crd:crdVersions=v1 paths="./$api/..." output:crd:artifacts:config=dist/crds

for extra in ${EXTRA_CRD_PATHS:-}; do
  go tool controller-gen crd:crdVersions=v1 paths="./$extra/..." output:crd:artifacts:config=dist/crds
done

rm -f go-controller/pkg/nbdb/*.go
go tool modelgen -extended -p nbdb -o go-controller/pkg/nbdb go-controller/pkg/nbdb/ovn-nb.ovsschema
gofmt -w go-controller/pkg/nbdb
