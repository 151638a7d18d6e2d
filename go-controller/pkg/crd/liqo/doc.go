// Package liqo holds copies of the Liqo API types that the direct-connections controllers read and write
// (go-controller/pkg/directconn). Group, version, kind, resource and field names are Liqo's, and every field of
// Liqo's objects is declared (or, where only part of the shape is known, kept as an unknown field), so that
// objects written by Liqo pass strict field validation on CRDs made from these types.
//
//   - offloading/v1beta1: ShadowEndpointSlice (spec.template: endpoints, ports, addressType).
//   - networking/v1beta1: Configuration (spec.local, spec.remote.cidr.{pod,external}[], status.remote.cidr.{pod,
//     external}[], status.conditions) and Connection (spec.type, spec.gatewayRef, status.value, status.latency).
//   - core/v1beta1: ForeignCluster (spec.clusterID, status.modules, status.conditions and the rest of its status).
//
// The CRD manifests in dist/crds are generated from these types by hack/update-liqo-crds.sh.
package liqo
