// Package directconn is the pure logic of direct connections between provider clusters in a Liqo-style
// multi-cluster setup: a consumer cluster offloads pods to several provider clusters through virtual nodes, and each
// pair of clusters may remap the other's pod CIDR to avoid overlaps.
//
// For a Service that opts in (annotation liqo.io/use-direct-connections: "true" on the consumer's Service), the
// consumer reflects each EndpointSlice to every provider P as a ShadowEndpointSlice and attaches the annotation
// liqo.io/direct-connections-data (see Data), which lists the endpoints that run on another provider C. On P, the
// ShadowEndpointSlice becomes an EndpointSlice in which each listed address is replaced by the address at which P
// reaches C's pod directly, as long as P's Connection to C is Connected.
//
// Nothing here talks to an apiserver: the functions take a snapshot (typed objects) and return the desired object
// plus the Problems to report as Events. The controllers live in the consumer and provider sub-packages.
package directconn
