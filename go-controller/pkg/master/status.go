package master

import (
	"context"
	"fmt"
	"maps"
	"sync"

	"golang.org/x/sync/errgroup"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	egressipv1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1"
	egressipclientset "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1/apis/clientset/versioned"
)

// statusMemory remembers the status this master last wrote per EgressIP, so that a
// sync that runs before the informer has delivered our own write neither acts on
// the older status (and moves IPs twice) nor writes with a stale resourceVersion.
// Only the sync goroutine uses it.
type statusMemory struct {
	written map[string]writtenStatus

	// own is, per EgressIP, the resourceVersion the apiserver returned for this
	// master's latest status write: read by the informer's handler (ownWrite), so
	// it has its own lock.
	mu  sync.Mutex
	own map[string]string
}

type writtenStatus struct {
	uid types.UID
	// basedOn are the resourceVersions the cached object had before our last write
	// (the one it had when we wrote, and those of our own earlier writes in a row);
	// as long as the cache shows one of them, the cache is behind our write.
	basedOn map[string]bool
	// resourceVersion is the one the apiserver returned for our write.
	resourceVersion string
	status          egressipv1.EgressIPStatus
}

func newStatusMemory() *statusMemory {
	return &statusMemory{written: map[string]writtenStatus{}, own: map[string]string{}}
}

// ownWrite tells whether the update old -> new is only this master's own latest
// status write: new is the version that write returned, and nothing but status
// differs from old (same generation, i.e. spec, same labels and annotations, not
// being deleted). Such an update is not an event: the sync that wrote it already
// planned with that status. Safe from any goroutine.
func (m *statusMemory) ownWrite(old, new *egressipv1.EgressIP) bool {
	if new.ResourceVersion == "" {
		return false
	}
	m.mu.Lock()
	rv := m.own[new.Name]
	m.mu.Unlock()
	return rv == new.ResourceVersion && old.UID == new.UID && old.Generation == new.Generation &&
		new.DeletionTimestamp == nil && maps.Equal(old.Labels, new.Labels) && maps.Equal(old.Annotations, new.Annotations)
}

// current returns the status the master should consider current for eip (a
// cached object) and the resourceVersion to base a write on.
func (m *statusMemory) current(eip *egressipv1.EgressIP) (egressipv1.EgressIPStatus, string) {
	w, ok := m.written[eip.Name]
	if ok && w.uid == eip.UID && eip.ResourceVersion != "" && w.basedOn[eip.ResourceVersion] {
		return w.status, w.resourceVersion
	}
	delete(m.written, eip.Name)
	return eip.Status, eip.ResourceVersion
}

func (m *statusMemory) remember(cached, updated *egressipv1.EgressIP) {
	if updated.ResourceVersion == "" {
		return // a client that does not version objects (fake): the cache is the truth
	}
	basedOn := map[string]bool{cached.ResourceVersion: true}
	if w, ok := m.written[cached.Name]; ok && w.uid == cached.UID && w.basedOn[cached.ResourceVersion] {
		// A second write before the cache caught up with the first (status, then
		// conditions once programmed): the first write's version is behind too.
		for rv := range w.basedOn {
			basedOn[rv] = true
		}
		basedOn[w.resourceVersion] = true
	}
	m.written[cached.Name] = writtenStatus{
		uid: cached.UID, basedOn: basedOn,
		resourceVersion: updated.ResourceVersion, status: updated.Status,
	}
	m.mu.Lock()
	m.own[cached.Name] = updated.ResourceVersion
	m.mu.Unlock()
}

// prune forgets EgressIPs that no longer exist.
func (m *statusMemory) prune(exists map[string]bool) {
	for name := range m.written {
		if !exists[name] {
			delete(m.written, name)
		}
	}
	m.mu.Lock()
	for name := range m.own {
		if !exists[name] {
			delete(m.own, name)
		}
	}
	m.mu.Unlock()
}

// writeStatus writes status to eip's status subresource, based on resourceVersion
// rv. It returns the updated object, or nil with a nil error when the EgressIP is
// gone.
func writeStatus(ctx context.Context, c egressipclientset.Interface, eip *egressipv1.EgressIP, rv string,
	status egressipv1.EgressIPStatus) (*egressipv1.EgressIP, error) {
	cp := eip.DeepCopy()
	cp.ResourceVersion = rv
	cp.Status = status
	updated, err := c.K8sV1().EgressIPs().UpdateStatus(ctx, cp, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("EgressIP %s: update status: %w", eip.Name, err)
	}
	return updated, nil
}

// statusWrite is one EgressIP status update: its input (eip, rv, status) and, once
// written, writeStatus' results (updated, err).
type statusWrite struct {
	eip     *egressipv1.EgressIP
	rv      string
	status  egressipv1.EgressIPStatus
	updated *egressipv1.EgressIP
	err     error
}

// writeStatuses runs writeStatus for every entry of writes, at most workers at
// once (each EgressIP is its own object, so the updates are independent; a node
// going away moves all its egress IPs, and their status updates must not queue
// one API round trip behind another before NB is written). Results are stored in
// the entries.
func writeStatuses(ctx context.Context, c egressipclientset.Interface, writes []statusWrite, workers int) {
	var g errgroup.Group
	g.SetLimit(max(1, workers))
	for i := range writes {
		w := &writes[i]
		g.Go(func() error {
			w.updated, w.err = writeStatus(ctx, c, w.eip, w.rv, w.status)
			return nil // each write's error stays in its entry
		})
	}
	_ = g.Wait() //nolint:errcheck // every func returns nil: each write's error stays in its entry
}
