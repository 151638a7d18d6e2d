// Package directconn is the pure logic of direct connections between provider clusters in a Liqo multi-cluster
// setup, in Liqo's own dialect: a consumer cluster offloads pods to several provider clusters through virtual nodes,
// and each pair of clusters may remap the other's pod CIDR to avoid overlaps.
//
// For a Service that opts in (annotation liqo.io/use-direct-connections: "true" on the consumer's Service), the
// consumer reflects each EndpointSlice to every provider P as a ShadowEndpointSlice in the shape Liqo's virtual
// kubelet writes (BuildShadow), with the annotation liqo.io/direct-connections-data (see Data) listing, per other
// provider C, the addresses of the endpoints running on C. On P, the ShadowEndpointSlice becomes the EndpointSlice
// Liqo's provider would make (BuildEndpointSlice): every address mapped with P's Configuration for the consumer,
// except the listed ones, which get the address at which P reaches C's pod directly while P's Connection to C is
// Connected.
//
// Nothing here talks to an apiserver: the functions take a snapshot (typed objects) and return the desired object
// plus the Problems to report as Events. The controllers live in the consumer and provider sub-packages.
package directconn
