// Package liqo holds minimal copies of the Liqo API types that the direct-connections controllers read and
// write (go-controller/pkg/directconn). Group, version, kind, resource and field names are Liqo's, so the
// controllers can run beside a real Liqo installation; only the fields the controllers use are declared.
//
//   - offloading/v1beta1: ShadowEndpointSlice (spec.template: endpoints, ports, addressType).
//   - networking/v1beta1: Configuration (spec.remote.cidr.pod[], status.remote.cidr.pod[]) and
//     Connection (status.value).
//
// The CRD manifests in dist/crds are generated from these types by hack/update-liqo-crds.sh.
package liqo
