package master

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"

	egressipv1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/nbstate"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/selection"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/nbdb"
)

// nbRows is what one sync wants of NB.
type nbRows struct {
	// desired: the shared rows and the rows of the pods in pods (in a full sync:
	// of every pod, and the served-pods address sets).
	desired nbstate.State
	pods    map[string]bool
	// touched are the pod IPs whose membership of the served-pods sets may have
	// changed (incremental syncs).
	touched map[netip.Addr]bool
	anyEIP  bool
}

// plan updates c.serving with what changed and returns the rows to converge. In a
// full sync c.serving is rebuilt from every pod.
func (c *controller) plan(d dirty, full bool, in nbstate.Input, eips []*egressipv1.EgressIP, rank selection.Ranked, now time.Time) (nbRows, error) {
	if full {
		fresh := newServing()
		fresh.ready = c.serving.ready // timing memory, not derived from NB
		c.serving = fresh
	}
	s := c.serving
	families := nbstate.Families(c.s.ClusterSubnets)
	reselect := map[string]bool{}
	rowDirty := map[string]bool{}

	if full {
		if len(rank.Names) > 0 {
			pods, err := c.pods.List(labels.Everything())
			if err != nil {
				return nbRows{}, fmt.Errorf("list pods: %w", err)
			}
			for _, p := range pods {
				reselect[podKey(p.Namespace, p.Name)] = true
			}
		}
	} else {
		for k := range d.pods {
			reselect[k] = true
		}
		for ns := range d.namespaces {
			if err := c.podsIn(ns, reselect); err != nil {
				return nbRows{}, err
			}
		}
	}

	// EgressIPs whose selection changed: the pods they served and the pods of the
	// namespaces they now select are selected again.
	var namespaces []*corev1.Namespace
	live := make(map[string]bool, len(eips))
	for _, e := range eips {
		live[e.Name] = true
		sig := sigOf(e)
		if old, ok := s.sigs[e.Name]; ok && old == sig {
			continue
		}
		s.sigs[e.Name] = sig
		if full {
			continue
		}
		for k := range s.eipPods[e.Name] {
			reselect[k], rowDirty[k] = true, true
		}
		i, ok := rank.Rank(e.Name)
		if !ok {
			continue
		}
		if namespaces == nil {
			var err error
			if namespaces, err = c.namespaces.List(labels.Everything()); err != nil {
				return nbRows{}, fmt.Errorf("list namespaces: %w", err)
			}
		}
		for _, ns := range namespaces {
			if rank.SelectsNamespace(i, ns) {
				if err := c.podsIn(ns.Name, reselect); err != nil {
					return nbRows{}, err
				}
			}
		}
	}
	for name := range s.sigs {
		if !live[name] {
			delete(s.sigs, name)
			delete(s.routes, name)
			delete(s.ready, name)
			for k := range s.eipPods[name] {
				reselect[k] = true
			}
		}
	}

	// Routes: a change makes every pod of that EgressIP dirty.
	for _, e := range eips {
		ne := toNB(e.Name, e.Status.Items, nil)
		routes := nbstate.Routes(in, ne)
		if c.s.mode == nbstate.LocalGateway {
			fb, expires := s.fallback(e.Name, routes, families, now, c.s.linger)
			if !expires.IsZero() {
				c.queue.AddAfter(syncKey, expires.Sub(now))
			}
			if fb != nil {
				ne.Fallback = fb
				routes = nbstate.Routes(in, ne)
			}
		}
		if !sameRoutes(routes, s.routes[e.Name]) {
			s.routes[e.Name] = routes
			for k := range s.eipPods[e.Name] {
				rowDirty[k] = true
			}
		}
	}

	// Selection of the pods that may have changed.
	for k := range reselect {
		ns, name, _ := strings.Cut(k, "/")
		pod, err := c.pods.Pods(ns).Get(name)
		if apierrors.IsNotFound(err) {
			pod, err = nil, nil
		}
		if err != nil {
			return nbRows{}, fmt.Errorf("pod %s: %w", k, err)
		}
		eip := ""
		if pod != nil {
			nsObj, err := c.namespaces.Get(ns)
			switch {
			case apierrors.IsNotFound(err):
			case err != nil:
				return nbRows{}, fmt.Errorf("namespace %s: %w", ns, err)
			default:
				eip = rank.Serve(nsObj, pod)
			}
		}
		old := s.pods[k].ips
		if s.choose(k, pod, eip) {
			rowDirty[k] = true
			s.coClaimants(old, rowDirty)
		}
	}
	// Pods sharing an IP with a dirty pod: which of them has the rows may change.
	for k := range rowDirty {
		s.coClaimants(s.pods[k].ips, rowDirty)
		s.coClaimants(s.servedIPs[k], rowDirty)
	}

	r := nbRows{pods: rowDirty, touched: map[netip.Addr]bool{}, anyEIP: len(eips) > 0, desired: nbstate.NewState()}
	if r.anyEIP {
		r.desired = nbstate.ClusterRows(in)
	}
	for k := range rowDirty {
		before, after := s.rows(k, c.s.mode, rank, &r.desired)
		for _, ip := range before {
			r.touched[ip] = true
		}
		for _, ip := range after {
			r.touched[ip] = true
		}
	}
	if full && r.anyEIP {
		for _, fam := range families {
			r.desired.AddressSets[nbstate.ServedPodsKey(fam)] = nbstate.ServedPodsRow(fam, s.servedAddresses(fam))
		}
	}
	return r, nil
}

// podsIn adds the keys of the pods of namespace ns to set.
func (c *controller) podsIn(ns string, set map[string]bool) error {
	pods, err := c.pods.Pods(ns).List(labels.Everything())
	if err != nil {
		return fmt.Errorf("list pods of namespace %s: %w", ns, err)
	}
	for _, p := range pods {
		set[podKey(p.Namespace, p.Name)] = true
	}
	return nil
}

// commit makes NB hold r: a full sync compares with every row we own in NB (read
// from the libovsdb cache and one select), an incremental one with the Mirror's rows of r.pods
// and the shared rows. One transaction; the Mirror follows what was committed.
func (c *controller) commit(ctx context.Context, r nbRows, full bool) error {
	tctx, cancelTimeout := context.WithTimeout(ctx, c.s.NBTimeout)
	defer cancelTimeout()
	gctx, cancelGuard := c.nb.Guard(tctx)
	defer cancelGuard()

	var cur nbstate.Current
	var err error
	if full {
		if cur, err = nbstate.ReadCurrentLive(gctx, c.nb, c.nb); err != nil {
			return err
		}
		c.foreignSets = cur.ForeignAddressSets
	} else {
		routers, err := nbstate.ReadRouters(c.nb)
		if err != nil {
			return err
		}
		cur = c.mirror.Current(r.pods, routers)
	}
	plan := nbstate.Diff(r.desired, cur)
	if !full && r.anyEIP {
		plan.Changes = append(c.servedChanges(r.touched), plan.Changes...)
	}
	if full {
		c.noteSkipped(plan.Skipped)
	}
	uuids, err := nbstate.CommitPlan(gctx, c.nb, plan)
	if err != nil {
		return err
	}
	if full {
		c.mirror = nbstate.NewMirror(cur)
	}
	if err := c.mirror.Commit(plan, uuids); err != nil {
		return err
	}
	if ins, upd, del := plan.Counts(); ins+upd+del > 0 {
		klog.V(2).InfoS("OVN Northbound rows updated", "inserted", ins, "updated", upd, "deleted", del, "full", full)
	}
	return nil
}

// servedChanges returns the changes of the served-pods address sets for the pod
// IPs in touched: only the difference travels. A set not in NB yet is inserted
// whole (unless a set of that name is someone else's: the full sync reports it).
func (c *controller) servedChanges(touched map[netip.Addr]bool) []nbstate.Change {
	var out []nbstate.Change
	for _, fam := range nbstate.Families(c.s.ClusterSubnets) {
		key := nbstate.ServedPodsKey(fam)
		row, ok := c.mirror.ServedPods(fam)
		if !ok {
			if !c.foreignSets[nbstate.ServedPodsAddressSet(fam)] {
				out = append(out, nbstate.Change{Op: nbstate.Insert, Table: nbdb.AddressSetTable, Key: key,
					Row: nbstate.ServedPodsRow(fam, c.serving.servedAddresses(fam))})
			}
			continue
		}
		var add, del []string
		for ip := range touched {
			if nbstate.Family(ip) != fam {
				continue
			}
			_, want := c.serving.servedBy[ip]
			have := c.mirror.HasServed(fam, ip.String())
			switch {
			case want && !have:
				add = append(add, ip.String())
			case !want && have:
				del = append(del, ip.String())
			}
		}
		if len(add)+len(del) > 0 {
			out = append(out, nbstate.Change{Op: nbstate.Update, Table: nbdb.AddressSetTable, Key: key, UUID: row.UUID,
				AddAddresses: add, DelAddresses: del})
		}
	}
	return out
}
