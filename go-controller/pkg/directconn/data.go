package directconn

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
)

// Data is the JSON document in annotation liqo.io/direct-connections-data on a ShadowEndpointSlice that the
// consumer writes into provider P. It lists every address of the slice that belongs to a pod running on another
// provider C (a virtual node of the consumer labelled liqo.io/remote-cluster-id=C, C != P). Addresses of pods on P
// and on the consumer are not listed; a slice with nothing to list carries no annotation.
//
//	{"endpoints":[{"clusterID":"cluster-c","realIP":"10.244.3.7","consumerIP":"10.71.3.7","reflectedIP":"10.71.3.7"}]}
//
// realIP is what lets P compute the direct address without guessing: the consumer may see C under a remapped CIDR
// (10.71.0.0/16 above) that means nothing to P, so it un-remaps consumerIP with its own Configuration for C
// (status entry -> spec entry at the same position) and writes C's own address. P then maps realIP with its
// Configuration for C (spec entry containing realIP -> status entry at the same position, host bits kept).
type Data struct {
	// Endpoints are the listed addresses, in the order they appear in the slice.
	Endpoints []DataEndpoint `json:"endpoints"`
}

// DataEndpoint is one listed address.
type DataEndpoint struct {
	// ClusterID is the cluster ID of provider C, where the pod runs.
	ClusterID string `json:"clusterID"`
	// RealIP is the pod's IP in C's own pod CIDR (C's spec.remote.cidr.pod as others know it).
	RealIP string `json:"realIP"`
	// ConsumerIP is the pod's IP as the consumer sees it (in the consumer's EndpointSlice).
	ConsumerIP string `json:"consumerIP"`
	// ReflectedIP is the same address as it appears in the ShadowEndpointSlice written to P: the indirect address
	// that P replaces with the direct one, and keeps when the direct path is not available.
	ReflectedIP string `json:"reflectedIP"`
}

// Encode renders d as compact JSON.
func (d Data) Encode() (string, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(d); err != nil {
		return "", err
	}
	return string(bytes.TrimRight(buf.Bytes(), "\n")), nil
}

// ParsedEndpoint is a DataEndpoint whose addresses have been parsed.
type ParsedEndpoint struct {
	ClusterID   string
	RealIP      netip.Addr
	ConsumerIP  netip.Addr
	ReflectedIP netip.Addr
}

// DecodeData parses the annotation value. Every entry must have a cluster ID and parsable realIP and reflectedIP
// of the same family (consumerIP is informative and may be empty); otherwise the whole document is rejected, since
// a partly understood document could pair the wrong addresses.
func DecodeData(s string) ([]ParsedEndpoint, error) {
	var d Data
	dec := json.NewDecoder(bytes.NewReader([]byte(s)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		return nil, fmt.Errorf("annotation %s is not a valid document: %w", DataAnnotation, err)
	}
	out := make([]ParsedEndpoint, 0, len(d.Endpoints))
	for i, e := range d.Endpoints {
		if e.ClusterID == "" {
			return nil, fmt.Errorf("annotation %s: endpoints[%d].clusterID is empty", DataAnnotation, i)
		}
		p := ParsedEndpoint{ClusterID: e.ClusterID}
		var err error
		if p.RealIP, err = netip.ParseAddr(e.RealIP); err != nil {
			return nil, fmt.Errorf("annotation %s: endpoints[%d].realIP: %w", DataAnnotation, i, err)
		}
		if p.ReflectedIP, err = netip.ParseAddr(e.ReflectedIP); err != nil {
			return nil, fmt.Errorf("annotation %s: endpoints[%d].reflectedIP: %w", DataAnnotation, i, err)
		}
		p.RealIP, p.ReflectedIP = p.RealIP.Unmap(), p.ReflectedIP.Unmap()
		if p.RealIP.BitLen() != p.ReflectedIP.BitLen() {
			return nil, fmt.Errorf("annotation %s: endpoints[%d]: realIP %s and reflectedIP %s are of different families",
				DataAnnotation, i, p.RealIP, p.ReflectedIP)
		}
		if e.ConsumerIP != "" {
			if p.ConsumerIP, err = netip.ParseAddr(e.ConsumerIP); err != nil {
				return nil, fmt.Errorf("annotation %s: endpoints[%d].consumerIP: %w", DataAnnotation, i, err)
			}
		}
		out = append(out, p)
	}
	return out, nil
}
