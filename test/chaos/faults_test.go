package chaos

// The rounds' random changes (EgressIPs, pods, namespace and node labels) and faults (kills, restarts, links cut).

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	egressipv1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/annotations"
	"github.com/ovn-egressip/ovn-egressip/test/cluster"
	"github.com/ovn-egressip/ovn-egressip/test/waitfor"
)

// Fault kinds.
const (
	faultNone      = "none"
	faultMaster    = "kill -9 master"
	faultNode      = "kill -9 node daemon"
	faultNBLeader  = "kill -9 NB leader"
	faultAPIServer = "apiserver restart"
	faultLinks     = "node links cut"
	// The interconnect layout's: the cluster manager takes the master's place (its kill is faultCM); a zone
	// controller (the per-node process, as faultNode) killed and restarted after a random delay of 1 to 9 s, within
	// or beyond the release linger; one zone's NB and SB ovsdb-servers killed and started again 0 to 3 s later.
	faultCM     = "kill -9 cluster manager"
	faultZone   = "kill -9 zone controller"
	faultZoneDB = "zone NB+SB restart"
)

// Change kinds.
const (
	chEIPCreate = "EgressIP created"
	chEIPEdit   = "EgressIP edited"
	chEIPDelete = "EgressIP deleted"
	chPodAdd    = "pod added"
	chPodDel    = "pod removed"
	chNSLabel   = "namespace relabelled"
	chNodeLabel = "node labelled/unlabelled"
)

const (
	maxEIPs    = 3
	maxPods    = 8
	namespaces = 4
)

// eipPool is EgressIP i's own address pool (i = 1..maxEIPs): no two EgressIPs ever ask for one address.
func eipPool(i int) []string {
	var out []string
	for k := 0; k < 4; k++ {
		out = append(out, fmt.Sprintf("172.18.0.%d", 50+10*i+k))
	}
	return out
}

func (h *harness) isCut(node string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.cut[node]
}

func (h *harness) labelNode(node string, on bool) error {
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:null}}}`, annotations.EgressAssignableLabel)
	if on {
		patch = fmt.Sprintf(`{"metadata":{"labels":{%q:""}}}`, annotations.EgressAssignableLabel)
	}
	return retry(h.ctx, func() error {
		_, err := h.c.Client().CoreV1().Nodes().Patch(h.ctx, node, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		return err
	})
}

func (h *harness) pickIPs(i int) []string {
	pool := eipPool(i)
	h.rnd.Shuffle(len(pool), func(a, b int) { pool[a], pool[b] = pool[b], pool[a] })
	ips := pool[:1+h.rnd.Intn(2)]
	sort.Strings(ips)
	return ips
}

func (h *harness) podSelector() metav1.LabelSelector {
	if h.rnd.Intn(2) == 0 {
		return metav1.LabelSelector{}
	}
	return metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}
}

// createEIP creates eip<i>: namespaces of team t<i>, its own address pool.
func (h *harness) createEIP(i int) error {
	e := &egressipv1.EgressIP{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("eip%d", i)},
		Spec: egressipv1.EgressIPSpec{EgressIPs: h.pickIPs(i),
			NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"team": fmt.Sprintf("t%d", i)}},
			PodSelector:       h.podSelector()}}
	return retry(h.ctx, func() error {
		_, err := h.eip.K8sV1().EgressIPs().Create(h.ctx, e, metav1.CreateOptions{})
		return err
	})
}

func (h *harness) eipNames() []int {
	var out []int
	list, err := h.eip.K8sV1().EgressIPs().List(h.ctx, metav1.ListOptions{})
	if err != nil {
		return nil
	}
	for _, e := range list.Items {
		var i int
		if _, err := fmt.Sscanf(e.Name, "eip%d", &i); err == nil {
			out = append(out, i)
		}
	}
	sort.Ints(out)
	return out
}

func (h *harness) addPod() error {
	node := h.c.Nodes()[h.rnd.Intn(len(h.c.Nodes()))].Name
	ns := fmt.Sprintf("ns%d", 1+h.rnd.Intn(namespaces))
	app := []string{"web", "db"}[h.rnd.Intn(2)]
	return h.addPodAt(node, ns, app)
}

// addPodAt adds a pod app=app on node in namespace ns and starts probing from it.
func (h *harness) addPodAt(node, ns, app string) error {
	h.podSeq++
	name := fmt.Sprintf("p%d", h.podSeq)
	// The apiserver may be restarting: 30 s of tries.
	err := waitfor.Retry(context.Background(), 30*time.Second, 500*time.Millisecond, func() error {
		_, err := h.c.CreatePod(h.ctx, cluster.PodSpec{Namespace: ns, Name: name, Node: node,
			Labels: map[string]string{"app": app}})
		return err
	})
	if err != nil {
		return fmt.Errorf("create pod %s/%s: %w", ns, name, err)
	}
	h.startProbe(ns + "/" + name)
	return nil
}

func (h *harness) deletePod(key string) error {
	h.stopProbe(key)
	ns, name, _ := strings.Cut(key, "/")
	return retry(h.ctx, func() error { return h.c.DeletePod(h.ctx, ns, name) })
}

// change applies one random change and returns its kind.
func (h *harness) change() (string, error) {
	eips := h.eipNames()
	h.mu.Lock()
	var pods []string
	for k := range h.pods {
		pods = append(pods, k)
	}
	h.mu.Unlock()
	sort.Strings(pods)
	switch h.rnd.Intn(7) {
	case 0:
		for i := 1; i <= maxEIPs; i++ {
			if !slices.Contains(eips, i) {
				return chEIPCreate, h.createEIP(i)
			}
		}
		fallthrough
	case 1:
		if len(eips) > 0 {
			i := eips[h.rnd.Intn(len(eips))]
			return chEIPEdit, retry(h.ctx, func() error {
				e, err := h.eip.K8sV1().EgressIPs().Get(h.ctx, fmt.Sprintf("eip%d", i), metav1.GetOptions{})
				if err != nil {
					return err
				}
				if h.rnd.Intn(2) == 0 {
					e.Spec.EgressIPs = h.pickIPs(i)
				} else {
					e.Spec.PodSelector = h.podSelector()
				}
				_, err = h.eip.K8sV1().EgressIPs().Update(h.ctx, e, metav1.UpdateOptions{})
				return err
			})
		}
		return h.change()
	case 2:
		if len(eips) > 1 {
			i := eips[h.rnd.Intn(len(eips))]
			return chEIPDelete, retry(h.ctx, func() error {
				return h.eip.K8sV1().EgressIPs().Delete(h.ctx, fmt.Sprintf("eip%d", i), metav1.DeleteOptions{})
			})
		}
		return h.change()
	case 3:
		if len(pods) < maxPods {
			return chPodAdd, h.addPod()
		}
		fallthrough
	case 4:
		if len(pods) > 2 {
			return chPodDel, h.deletePod(pods[h.rnd.Intn(len(pods))])
		}
		return chPodAdd, h.addPod()
	case 5:
		i := 1 + h.rnd.Intn(namespaces)
		return chNSLabel, h.ensureNamespace(fmt.Sprintf("ns%d", i), fmt.Sprintf("t%d", 1+h.rnd.Intn(maxEIPs+1)))
	default:
		n := h.c.Nodes()[h.rnd.Intn(len(h.c.Nodes()))].Name
		return chNodeLabel, h.labelNode(n, h.rnd.Intn(3) > 0)
	}
}

// changes applies 1 to 3 random changes.
func (h *harness) changes(round int) []string {
	var what []string
	for i, n := 0, 1+h.rnd.Intn(3); i < n; i++ {
		kind, err := h.change()
		if err == nil {
			err = h.noteState() // the window's own sources in this state too
		}
		if err != nil {
			h.t.Fatalf("round %d: %s: %v", round, kind, err)
		}
		h.changeCount[kind]++
		what = append(what, kind)
	}
	return what
}

// fault injects the next fault of a shuffled deck of every kind, makes the round's changes while it lasts (before it, for an apiserver restart,
// since nothing can be changed while the apiserver is away), and heals it: the supervisor restarts a killed ovnkube
// process (as the kubelet would), a killed NB member is restarted 2 to 5 s later, a node's links are restored once
// the checker has seen its egress IPs move away. It returns the fault's kind, the changes and when the fault began.
func (h *harness) fault(round int) (string, []string, time.Time, error) {
	if len(h.deck) == 0 {
		// A shuffled deck of every kind: each one comes up once before any comes up again, so that even a short
		// run injects them all.
		h.deck = []string{faultNone, faultMaster, faultNode, faultAPIServer, faultLinks}
		if h.c.NBRaft() {
			h.deck = append(h.deck, faultNBLeader)
		}
		if h.interconnect() {
			h.deck = []string{faultNone, faultCM, faultNode, faultZone, faultZoneDB, faultAPIServer, faultLinks}
		}
		h.rnd.Shuffle(len(h.deck), func(i, j int) { h.deck[i], h.deck[j] = h.deck[j], h.deck[i] })
	}
	kind := h.deck[0]
	h.deck = h.deck[1:]
	t0 := time.Now()
	switch kind {
	case faultMaster, faultCM:
		if err := h.sup.kill9(h.leader, restartDelay); err != nil {
			return kind, nil, t0, err
		}
		what := h.changes(round) // while no master runs (the new one waits for the Lease to expire)
		return kind, what, t0, h.waitServing(h.leader)
	case faultNode, faultZone:
		n := "node-" + h.c.Nodes()[h.rnd.Intn(len(h.c.Nodes()))].Name
		delay := restartDelay
		if kind == faultZone {
			delay = time.Duration(1+h.rnd.Intn(9)) * time.Second
		}
		if err := h.sup.kill9(n, delay); err != nil {
			return kind, nil, t0, err
		}
		if err := h.zoneDown(strings.TrimPrefix(n, "node-")); err != nil { // one process: zone controller and daemon
			return kind, nil, t0, err
		}
		what := h.changes(round) // while the process is down: moves its zone has yet to see
		if kind == faultZone {
			h.logf("round %d: %s killed, restarted %s later", round, n, delay)
		}
		return kind, what, t0, h.waitServing(n)
	case faultZoneDB:
		n := h.c.Nodes()[h.rnd.Intn(len(h.c.Nodes()))].Name
		if err := h.c.StopZoneDatabases(h.ctx, n, false); err != nil {
			return kind, nil, t0, err
		}
		if err := h.zoneDown(n); err != nil {
			return kind, nil, t0, err
		}
		// The zone's controller, northd and ovn-controller lose their databases; the databases come back after down
		// whatever the changes do meanwhile (the harness' own pod wiring in that zone waits for them, and retries).
		down := time.Duration(h.rnd.Intn(4)) * time.Second
		started := make(chan error, 1)
		go func() {
			select {
			case <-h.ctx.Done():
			case <-time.After(down):
			}
			started <- h.c.StartZoneDatabases(h.ctx, n, false)
		}()
		what := h.changes(round)
		err := <-started
		h.logf("round %d: zone %s's NB and SB down %s", round, n, down)
		return kind, what, t0, err
	case faultNBLeader:
		l, err := h.c.NBLeader(h.ctx)
		if err != nil {
			return kind, nil, t0, err
		}
		if err := h.c.KillNBMember(l); err != nil {
			return kind, nil, t0, err
		}
		what := h.changes(round) // the master's syncs fail until it has found the new leader
		//nolint:forbidigo // the fault's length: the old NB leader stays down 2-5 s while the changes go on
		time.Sleep(time.Duration(2+h.rnd.Intn(4)) * time.Second)
		return kind, what, t0, h.c.StartNBMember(h.ctx, l)
	case faultAPIServer:
		what := h.changes(round)
		t0 = time.Now()
		return kind, what, t0, h.c.RestartAPIServer(h.ctx, time.Duration(h.rnd.Intn(3))*time.Second)
	case faultLinks:
		n := h.c.Nodes()[h.rnd.Intn(len(h.c.Nodes()))].Name
		h.mu.Lock()
		h.cut[n] = true
		h.mu.Unlock()
		if err := h.c.SetNodeLinks(h.ctx, n, false); err != nil {
			return kind, nil, t0, err
		}
		if err := h.zoneDown(n); err != nil { // its zone controller cannot hear the apiserver: it cannot program
			return kind, nil, t0, err
		}
		what := h.changes(round)
		// The master must find the node unreachable and move its IPs (checked; with no other egress node left to
		// answer, it keeps them: the checker's held), then the links come back.
		// In the interconnect layout the cut node's zone controller cannot hear the apiserver either: its zone and
		// its Node's annotations stay as they were until the links are back, so only status is checked then, and
		// the window stays open (the check after the links are back is the round's).
		if v, ok := h.converge(h.interconnect()); !ok {
			h.badCheck = append(h.badCheck, fmt.Sprintf("round %d, while %s's links were cut: %v", round, n, v))
		}
		h.openWindow() // the node comes back: an EgressIP short of nodes gets its other IPs
		h.mu.Lock()
		delete(h.cut, n)
		h.mu.Unlock()
		return kind, what, t0, h.c.SetNodeLinks(h.ctx, n, true)
	}
	return kind, h.changes(round), t0, nil
}

// waitServing waits until the restarted process answers on its metrics address (it is up again).
func (h *harness) waitServing(name string) error {
	h.sup.mu.Lock()
	p := h.sup.procs[name]
	h.sup.mu.Unlock()
	if err := waitfor.Until(context.Background(), 60*time.Second, 100*time.Millisecond, func() (bool, error) {
		return scrape(h.ctx, p).goroutines >= 0, nil
	}); err != nil {
		return fmt.Errorf("%s does not serve metrics 60 s after it was killed", name)
	}
	return nil
}
