#!/usr/bin/env bash
# Fails when generated code, CRDs, docs/flags.md, go.mod/go.sum or dist/manifests (rendered from the Helm chart) are stale.
set -euo pipefail
cd "$(dirname "$0")/.."
make generate >/dev/null
go mod tidy
if ! git diff --exit-code --stat -- . ; then
  echo "verify: generated files (docs/flags.md: make docs) or go.mod/go.sum are stale: run 'make generate && go mod tidy' and commit" >&2
  exit 1
fi
if [ -n "$(git status --porcelain --untracked-files=all -- go-controller dist go.mod go.sum)" ]; then
  git status --porcelain --untracked-files=all -- go-controller dist go.mod go.sum >&2
  echo "verify: generation created untracked files" >&2
  exit 1
fi
go mod verify
./hack/verify-chart.sh
