package directconn

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"sort"
)

// Data is the JSON document in annotation liqo.io/direct-connections-data on a ShadowEndpointSlice written into
// provider P, in Liqo's format:
//
//	{"clusterAddresses":{"cluster-c":["10.71.3.7"]},"realIPs":{"10.71.3.7":"10.244.3.7"}}
//
// clusterAddresses lists, per provider C other than P, the addresses of the slice's endpoints that run on C (on a
// virtual node labelled liqo.io/remote-cluster-id=C), exactly as they appear in the shadow's endpoints: the
// consumer's view, untranslated. This is all Liqo writes and reads.
//
// realIPs is our extension (Liqo's parser ignores unknown fields): for a listed address that the consumer sees
// under a remapped CIDR (C's pod CIDR overlaps another cluster's), the pod's own IP in C, computed by the consumer
// with its Configuration for C (status entry containing the address -> spec entry at the same position, host bits
// kept). The provider maps that real IP with its own Configuration for C; the consumer's remapped view means
// nothing to the provider. Addresses whose real IP is the address itself are not in realIPs.
type Data struct {
	// ClusterAddresses maps a provider cluster ID to the addresses of the endpoints running there.
	ClusterAddresses map[string][]string `json:"clusterAddresses"`
	// RealIPs maps a listed address to the pod's IP in its own cluster, when they differ.
	RealIPs map[string]string `json:"realIPs,omitempty"`
}

// Data document field names, for messages.
const (
	fieldClusterAddresses = "clusterAddresses"
	fieldRealIPs          = "realIPs"
)

// Encode renders d as compact JSON (map keys sorted, so equal documents encode equally).
func (d Data) Encode() (string, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(d); err != nil {
		return "", fmt.Errorf("encoding %s: %w", DataAnnotation, err)
	}
	return string(bytes.TrimRight(buf.Bytes(), "\n")), nil
}

// ParsedData is the usable part of a data document.
type ParsedData struct {
	// Cluster maps each listed address to the cluster it runs on.
	Cluster map[netip.Addr]string
	// Real maps a listed address to the pod's real IP, when the document gives one (our extension).
	Real map[netip.Addr]netip.Addr
}

// Clusters returns the listed cluster IDs, sorted.
func (p ParsedData) Clusters() []string {
	seen := map[string]bool{}
	var out []string
	for _, c := range p.Cluster {
		if !seen[c] {
			seen[c] = true
			out = append(out, c)
		}
	}
	sort.Strings(out)
	return out
}

// ParseData reads the annotation value, keeping every part it can use. Each part it cannot use is a Problem
// (reason ReasonInvalidData) whose message names the field and value: a document that is not a JSON object (nothing
// is listed), an unknown field (ignored; Liqo ignores them too), a clusterAddresses entry that is not a list of
// strings, an empty cluster ID, an address that does not parse, an address listed for several clusters (listed for
// none), a realIPs entry that does not parse, names an unlisted address or mixes IP families (ignored).
func ParseData(s string) (ParsedData, []Problem) {
	out := ParsedData{Cluster: map[netip.Addr]string{}, Real: map[netip.Addr]netip.Addr{}}
	var problems []Problem
	bad := func(format string, args ...any) {
		problems = append(problems, Problem{Reason: ReasonInvalidData,
			Message: fmt.Sprintf("annotation %s: ", DataAnnotation) + fmt.Sprintf(format, args...)})
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal([]byte(s), &top); err != nil {
		bad("not a JSON object (%v): no address is listed, every address is mapped through the consumer", err)
		return out, problems
	}
	for _, k := range sortedKeys(top) {
		if k != fieldClusterAddresses && k != fieldRealIPs {
			bad("unknown field %q ignored", k)
		}
	}

	var clusters map[string]json.RawMessage
	if raw, ok := top[fieldClusterAddresses]; ok {
		if err := json.Unmarshal(raw, &clusters); err != nil {
			bad("field %s is not an object of cluster IDs (%v): no address is listed", fieldClusterAddresses, err)
		}
	}
	ambiguous := map[netip.Addr]bool{}
	for _, id := range sortedKeys(clusters) {
		var addrs []string
		if err := json.Unmarshal(clusters[id], &addrs); err != nil {
			bad("%s[%q] is not a list of addresses (%v): ignored", fieldClusterAddresses, id, err)
			continue
		}
		if id == "" {
			bad("%s has an empty cluster ID: its addresses %v are not listed", fieldClusterAddresses, addrs)
			continue
		}
		for i, a := range addrs {
			ip, err := netip.ParseAddr(a)
			if err != nil {
				bad("%s[%q][%d] %q is not an IP address: ignored", fieldClusterAddresses, id, i, a)
				continue
			}
			ip = ip.Unmap()
			if prev, seen := out.Cluster[ip]; (seen && prev != id) || ambiguous[ip] {
				if !ambiguous[ip] {
					bad("address %s is listed for clusters %s and %s (%s[%q][%d]): listed for neither",
						ip, prev, id, fieldClusterAddresses, id, i)
				}
				delete(out.Cluster, ip)
				ambiguous[ip] = true
				continue
			}
			out.Cluster[ip] = id
		}
	}

	parseRealIPs(top[fieldRealIPs], &out, ambiguous, bad)
	return out, problems
}

// parseRealIPs reads the realIPs field raw (absent: nil) into out.Real: only for addresses out.Cluster lists, of
// the same family. ambiguous are the addresses listed for several clusters (not reported again).
func parseRealIPs(raw json.RawMessage, out *ParsedData, ambiguous map[netip.Addr]bool, bad func(format string, args ...any)) {
	var reals map[string]string
	if raw != nil {
		if err := json.Unmarshal(raw, &reals); err != nil {
			bad("field %s is not an object of addresses (%v): ignored", fieldRealIPs, err)
		}
	}
	for _, k := range sortedKeys(reals) {
		v := reals[k]
		listed, err1 := netip.ParseAddr(k)
		realIP, err2 := netip.ParseAddr(v)
		switch {
		case err1 != nil:
			bad("%s key %q is not an IP address: ignored", fieldRealIPs, k)
		case err2 != nil:
			bad("%s[%q] %q is not an IP address: ignored", fieldRealIPs, k, v)
		case listed.Unmap().BitLen() != realIP.Unmap().BitLen():
			bad("%s[%q] %q is of another IP family: ignored", fieldRealIPs, k, v)
		default:
			if _, ok := out.Cluster[listed.Unmap()]; !ok {
				if !ambiguous[listed.Unmap()] {
					bad("%s[%q] names an address not listed in %s: ignored", fieldRealIPs, k, fieldClusterAddresses)
				}
				continue
			}
			out.Real[listed.Unmap()] = realIP.Unmap()
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
