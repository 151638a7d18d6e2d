package selection

import (
	"net/netip"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// IPClaim is one served pod object and its pod IPs: its namespace, name and
// creation time say whether it owns an IP another served pod object also has.
type IPClaim struct {
	Namespace, Name string
	Created         time.Time
	IPs             []netip.Addr
}

// ClaimOf is the IPClaim of a pod (its IPs: PodIPs).
func ClaimOf(pod *corev1.Pod) IPClaim {
	return IPClaim{Namespace: pod.Namespace, Name: pod.Name, Created: pod.CreationTimestamp.Time, IPs: PodIPs(pod)}
}

// OwnsBefore is the one rule for which of two pod objects sharing a pod IP owns
// it (and so has its reroute and SNAT, under the EgressIP that serves it): the one
// created later (an IP is handed to a new pod only once the old one's sandbox is
// gone, so the old object, terminating or Completed but still listed, no longer
// has it), then by namespace and name. It does not depend on which EgressIP serves
// either pod: a pod IP is never carried for an EgressIP that does not select the
// pod object owning the IP. The master (Owner; explain and migrate plan with the
// master's code) and the node daemon (Owners) both use it.
func OwnsBefore(a, b IPClaim) bool {
	if !a.Created.Equal(b.Created) {
		return a.Created.After(b.Created)
	}
	if a.Namespace != b.Namespace {
		return a.Namespace < b.Namespace
	}
	return a.Name < b.Name
}

// Owner returns the index in claims, all of one shared IP, of the pod object
// owning it (OwnsBefore); -1 when claims is empty. Their IPs are not looked at.
func Owner(claims []IPClaim) int {
	best := -1
	for i, c := range claims {
		if best < 0 || OwnsBefore(c, claims[best]) {
			best = i
		}
	}
	return best
}

// Owners maps every IP of claims to the index of the claim owning it
// (OwnsBefore among the claims having that IP).
func Owners(claims []IPClaim) map[netip.Addr]int {
	out := map[netip.Addr]int{}
	for i, c := range claims {
		for _, ip := range c.IPs {
			if cur, ok := out[ip]; !ok || OwnsBefore(c, claims[cur]) {
				out[ip] = i
			}
		}
	}
	return out
}
