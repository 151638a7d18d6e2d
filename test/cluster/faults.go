package cluster

import (
	"context"
	"fmt"
	"os"
	"syscall"
	"time"
)

// SetNodeLinks sets both OVS-side ends of a node's links (in the root namespace, or its chassis namespace in the
// interconnect layout) (its eth0 on br-ex and its management port on br-int)
// down (up=false) or up: the node's daemon loses the apiserver and NB, and the master's health check loses the
// node, while OVN (one ovn-controller for every gateway router) keeps forwarding: a network partition of that host.
func (c *Cluster) SetNodeLinks(ctx context.Context, node string, up bool) error {
	n, err := c.Node(node)
	if err != nil {
		return err
	}
	state := "down"
	if up {
		state = "up"
	}
	for _, l := range []string{ethLink(n.Index), mgmtLink(n.Index)} {
		// Interconnect layout: the OVS end of a link on the node's own bridges is in its chassis namespace.
		args := []string{"link", "set", l, state}
		if _, err := run(ctx, "ip", "link", "show", l); err != nil && c.Layout() == LayoutInterconnect {
			args = append([]string{"-n", ChassisNetnsName(node)}, args...)
		}
		if _, err := run(ctx, "ip", args...); err != nil {
			return fmt.Errorf("%s's link %s %s: %w", node, l, state, err)
		}
	}
	return nil
}

// RestartAPIServer stops kube-apiserver with SIGTERM (as a rolling upgrade does; SIGKILL after 20 s), waits for
// down, starts it again with the same command line, and waits until it answers. etcd keeps running.
func (c *Cluster) RestartAPIServer(ctx context.Context, down time.Duration) error {
	pidFile := c.p.pidfile("kube-apiserver")
	pid, err := readPid(pidFile)
	if err != nil {
		return err
	}
	argv, err := procArgv(pid)
	if err != nil {
		return err
	}
	_ = syscall.Kill(pid, syscall.SIGTERM)
	for deadline := time.Now().Add(20 * time.Second); alive(pid); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	_ = os.Remove(pidFile)
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(down):
	}
	if _, err := startDaemon(pidFile, c.p.log()+"/kube-apiserver.log", nil, argv...); err != nil {
		return fmt.Errorf("restart kube-apiserver: %w", err)
	}
	rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	return waitAPIServerReady(rctx, c.p, pki{dir: c.p.pki()}, c.st.APIServer)
}

// procArgv is the command line of a running process.
func procArgv(pid int) ([]string, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return nil, err
	}
	var argv []string
	start := 0
	for i, b := range data {
		if b == 0 {
			argv = append(argv, string(data[start:i]))
			start = i + 1
		}
	}
	if len(argv) == 0 {
		return nil, fmt.Errorf("process %d: empty command line", pid)
	}
	return argv, nil
}

// DaemonPids maps the name of every daemon of the cluster (pidfile name: ovsdb-server, ovnnb_db, ovn-northd,
// kube-apiserver, ...; node1/ovnnb_db, ... of the interconnect layout's zones) that runs now to its pid, for memory sampling.
func (c *Cluster) DaemonPids() map[string]int {
	out := map[string]int{}
	names := append([]string{nbMemberName(1), nbMemberName(2)}, daemons...)
	for _, n := range c.nodes { // the interconnect layout's zones: <node>/ovnnb_db, ...
		for _, d := range zoneDaemons {
			names = append(names, zonePidName(n.Name, d))
		}
	}
	for _, d := range names {
		if pid, err := readPid(c.p.pidfile(d)); err == nil && alive(pid) {
			out[d] = pid
		}
	}
	return out
}

// WaitDataPath waits (at most timeout) until OVN has carried every NB change made so far to the data path:
// `ovn-nbctl --wait=hv sync` (ovn-northd has written it to SB and ovn-controller has installed its flows). With a
// RAFT NB it goes through the leader, retrying while northd or the client looks for it.
func (c *Cluster) WaitDataPath(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if c.st.layout() == LayoutInterconnect { // every zone
		for _, n := range c.nodes {
			if err := waitNBSynced(ctx, c.ZoneNBAddress(n.Name)); err != nil {
				return fmt.Errorf("zone %s: %w", n.Name, err)
			}
		}
		return nil
	}
	return waitNBSynced(ctx, c.st.NBAddress)
}

// waitNBSynced runs `ovn-nbctl --wait=hv sync` against address until it succeeds or ctx ends.
func waitNBSynced(ctx context.Context, address string) error {
	var last error
	for {
		secs := max(1, int(time.Until(deadlineOf(ctx)).Seconds()))
		_, err := run(ctx, "ovn-nbctl", "--db="+address, fmt.Sprintf("--timeout=%d", secs), "--wait=hv", "sync")
		if err == nil {
			return nil
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("data path not in sync with NB: %w", last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func deadlineOf(ctx context.Context) time.Time {
	d, ok := ctx.Deadline()
	if !ok {
		return time.Now().Add(time.Minute)
	}
	return d
}
