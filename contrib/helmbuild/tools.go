//go:build tools

// Package tools pins the helm CLI that contrib/build-helm.sh builds from the Go module proxy.
package tools

import (
	_ "helm.sh/helm/v4/cmd/helm"
)
