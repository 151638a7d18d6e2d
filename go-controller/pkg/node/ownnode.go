package node

import (
	"maps"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/resourceversion"
)

// ownWrites is read-your-writes for the own Node. The daemon patches its Node and the Node informer delivers the
// result later; until it does, a sync must read the patch's result, or it patches the same values again. The rule:
// the daemon's Node is the newer, by resourceVersion (which the apiserver orders: integers that grow with every
// write), of the informer's cached object and the object the last patch returned. Two patches before the informer
// delivers the first, or another writer's change that reaches the cache before our patch's result, leave the cache
// older than the result, so the result is read. Versions that cannot be ordered (a client that does not version
// objects) leave the cache as the truth: a patch sent twice is harmless, a newer change of another writer hidden
// behind our result is not.
//
// It also remembers, for the informer's handler, what each patch not yet delivered set (delivered): the delivery of
// only our own patches is not an event, the sync that patched already acted on it.
//
// node and wrote are called by the sync, delivered by the informer's handler; mu guards both.
type ownWrites struct {
	mu sync.Mutex
	// latest is what the last patch returned, until the cache holds that version or a newer one.
	latest *corev1.Node
	// pending are the patches the informer has not delivered, oldest first.
	pending []ownWrite
}

// ownWrite is one patch of the own Node: the resourceVersion it returned and the annotations it set (nil: removed).
type ownWrite struct {
	rv  string
	set map[string]*string
}

// compareRV orders two resourceVersions as the apiserver gives them; ok is false when either is not one.
func compareRV(a, b string) (int, bool) {
	c, err := resourceversion.CompareResourceVersion(a, b)
	return c, err == nil
}

// node is the own Node as freshest known, given the informer's cached object.
func (w *ownWrites) node(cached *corev1.Node) *corev1.Node {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.latest == nil {
		return cached
	}
	if c, ok := compareRV(w.latest.ResourceVersion, cached.ResourceVersion); ok && c > 0 {
		return w.latest
	}
	w.latest = nil // the cache has caught up (or cannot be ordered against the result: it is the truth)
	return cached
}

// wrote records a patch that set set and returned updated.
func (w *ownWrites) wrote(updated *corev1.Node, set map[string]*string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := compareRV(updated.ResourceVersion, updated.ResourceVersion); !ok {
		w.latest, w.pending = nil, nil // not versioned: nothing to order the cache against
		return
	}
	w.latest = updated
	w.pending = append(w.pending, ownWrite{rv: updated.ResourceVersion, set: set})
}

// delivered is called with every Node the informer delivers (o: the cached object it replaces, nil for an add). It
// forgets the patches whose results n includes, and tells whether o -> n is only our own patches: n is the version
// one of them returned, and n's annotations are o's with the patches o does not include applied in order.
func (w *ownWrites) delivered(o, n any) bool {
	nn, ok := n.(*corev1.Node)
	if !ok {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	var since []ownWrite // the patches after o, up to n
	own := false
	keep := make([]ownWrite, 0, len(w.pending))
	for _, p := range w.pending {
		c, ok := compareRV(p.rv, nn.ResourceVersion)
		if !ok || c > 0 {
			keep = append(keep, p)
			continue
		}
		own = own || c == 0
		since = append(since, p)
	}
	w.pending = keep
	on, ok := o.(*corev1.Node)
	if !own || !ok {
		return false
	}
	want := maps.Clone(on.Annotations)
	if want == nil {
		want = map[string]string{} // the patches may add to it
	}
	for _, p := range since {
		c, ok := compareRV(p.rv, on.ResourceVersion)
		if !ok {
			return false
		}
		if c <= 0 {
			continue // o has it
		}
		for k, v := range p.set {
			if v == nil {
				delete(want, k)
			} else {
				want[k] = *v
			}
		}
	}
	return maps.Equal(want, nn.Annotations) // nil and empty are equal
}
