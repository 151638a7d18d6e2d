package nbserver

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ovn-org/libovsdb/client"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/nbdb"
	"github.com/ovn-egressip/ovn-egressip/test/ports"
)

// ClusterSize is the number of members StartCluster starts (a RAFT cluster of
// three survives the loss of any one member, as deployed).
const ClusterSize = 3

// Cluster is a clustered (RAFT) NB database of ClusterSize ovsdb-server members,
// each serving clients on its own unix socket and talking RAFT to the others on a
// loopback TCP port (RAFT only runs over tcp: or ssl:).
type Cluster struct {
	// Addr is the comma-separated client addresses of every member, as OVN's
	// tools and ovnkube --nb-address take them.
	Addr    string
	Dir     string
	Members []*Member
	t       testing.TB
}

// Member is one ovsdb-server of a Cluster.
type Member struct {
	Index int
	// Addr is the member's client address, "unix:<dir>/m<i>.sock".
	Addr string
	// Raft is the member's RAFT address, "tcp:127.0.0.1:PORT".
	Raft string
	dir  string

	mu     sync.Mutex
	cmd    *exec.Cmd
	waited chan struct{}
}

// StartCluster creates a 3-member clustered OVN_Northbound database with
// `ovsdb-tool create-cluster` (member 0) and `ovsdb-tool join-cluster` (members 1
// and 2), starts the three ovsdb-servers and waits until every member is part of
// the cluster and one is leader. It skips the test when the OVS tools are not
// installed. Everything stops at cleanup.
func StartCluster(t testing.TB) *Cluster {
	t.Helper()
	needTools(t, "ovsdb-server", "ovsdb-tool", "ovs-appctl")
	c := &Cluster{t: t, Dir: shortTempDir(t)}
	schemaPath := writeSchema(t, c.Dir)
	var addrs []string
	for i := 0; i < ClusterSize; i++ {
		m := &Member{Index: i, dir: c.Dir, Raft: "tcp:" + ports.FreeLoopbackAddr(t)}
		m.Addr = "unix:" + m.socket()
		c.Members = append(c.Members, m)
		addrs = append(addrs, m.Addr)
	}
	c.Addr = strings.Join(addrs, ",")
	t.Cleanup(c.Stop)
	for i, m := range c.Members {
		var args []string
		if i == 0 {
			args = []string{"create-cluster", m.dbFile(), schemaPath, m.Raft}
		} else {
			args = []string{"join-cluster", m.dbFile(), "OVN_Northbound", m.Raft, c.Members[0].Raft}
		}
		if out, err := exec.Command("ovsdb-tool", args...).CombinedOutput(); err != nil {
			t.Fatalf("ovsdb-tool %s: %v: %s", strings.Join(args, " "), err, out)
		}
		m.start(t)
	}
	c.WaitFormed()
	return c
}

func (m *Member) socket() string  { return filepath.Join(m.dir, fmt.Sprintf("m%d.sock", m.Index)) }
func (m *Member) dbFile() string  { return filepath.Join(m.dir, fmt.Sprintf("m%d.db", m.Index)) }
func (m *Member) ctlFile() string { return filepath.Join(m.dir, fmt.Sprintf("m%d.ctl", m.Index)) }
func (m *Member) logFile() string { return filepath.Join(m.dir, fmt.Sprintf("m%d.log", m.Index)) }

// Running reports whether the member's process is running.
func (m *Member) Running() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cmd != nil
}

func (m *Member) start(t testing.TB) {
	t.Helper()
	cmd, waited := startOvsdbServer(t, fmt.Sprintf("ovsdb-server member %d", m.Index), m.dir, []string{m.dbFile(),
		"--remote=punix:" + m.socket(),
		"--unixctl=" + m.ctlFile(),
		"--log-file=" + m.logFile(),
		"--no-chdir", "-vconsole:off", "-vraft:file:dbg"})
	m.mu.Lock()
	m.cmd, m.waited = cmd, waited
	m.mu.Unlock()
	waitSocket(t, fmt.Sprintf("NB member %d", m.Index), m.socket(), m.logFile())
}

// Kill stops the member with SIGKILL (no chance to hand leadership over or close
// its connections cleanly: what a crashed host or OOM kill looks like) and waits
// for it to exit. Its database file stays for Start.
func (m *Member) Kill() { m.stop(syscall.SIGKILL) }

func (m *Member) stop(sig syscall.Signal) {
	m.mu.Lock()
	cmd, waited := m.cmd, m.waited
	m.cmd = nil
	m.mu.Unlock()
	stopProcess(cmd, waited, sig, m.socket())
}

// Start starts a stopped member again on its database file: it rejoins the cluster.
func (m *Member) Start(t testing.TB) {
	t.Helper()
	if m.Running() {
		t.Fatalf("NB member %d is already running", m.Index)
	}
	m.start(t)
}

// Status is `ovs-appctl cluster/status OVN_Northbound` of the member.
func (m *Member) Status() (string, error) {
	out, err := exec.Command("ovs-appctl", "-t", m.ctlFile(), "cluster/status", "OVN_Northbound").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("cluster/status of member %d: %w: %s", m.Index, err, out)
	}
	return string(out), nil
}

// statusField returns the value of "Name: value" in a cluster/status output.
func statusField(status, name string) string {
	for _, line := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(line, name+": "); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// Role is the member's RAFT role (leader, follower, candidate), "" when it is down.
func (m *Member) Role() string {
	if !m.Running() {
		return ""
	}
	s, err := m.Status()
	if err != nil {
		return ""
	}
	return statusField(s, "Role")
}

// Leader returns the member that is leader now, waiting up to 15 s for an election.
func (c *Cluster) Leader() *Member {
	c.t.Helper()
	var last []string
	deadline := time.Now().Add(15 * time.Second)
	for {
		last = last[:0]
		for _, m := range c.Members {
			role := m.Role()
			if role == "leader" {
				return m
			}
			last = append(last, fmt.Sprintf("member %d: %q", m.Index, role))
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("no NB RAFT leader after 15 s: %s", strings.Join(last, ", "))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// WaitFormed waits (30 s at most) until every running member reports itself a
// cluster member that knows every other member and has a leader: a restarted
// member has rejoined and caught up with the log.
func (c *Cluster) WaitFormed() {
	c.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := c.formed()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("NB RAFT cluster not formed after 30 s: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (c *Cluster) formed() error {
	leaders := 0
	for _, m := range c.Members {
		if !m.Running() {
			continue
		}
		s, err := m.Status()
		if err != nil {
			return err
		}
		if st := statusField(s, "Status"); st != "cluster member" {
			return fmt.Errorf("member %d status %q", m.Index, st)
		}
		if statusField(s, "Role") == "leader" {
			leaders++
		}
		if l := statusField(s, "Leader"); l == "" || l == "unknown" {
			return fmt.Errorf("member %d knows no leader", m.Index)
		}
		if n := strings.Count(s[strings.Index(s, "Servers:"):], "at tcp:"); n != len(c.Members) {
			return fmt.Errorf("member %d knows %d servers, want %d", m.Index, n, len(c.Members))
		}
	}
	if leaders != 1 {
		return fmt.Errorf("%d leaders", leaders)
	}
	return nil
}

// Stop stops every member (SIGTERM). Calling it twice is fine.
func (c *Cluster) Stop() {
	for _, m := range c.Members {
		m.stop(syscall.SIGTERM)
	}
}

// Server is the cluster seen as one NB database: Addr is the member list and
// Client follows the leader. Dir is the cluster's directory. Restart and Stop
// are not supported on it (use the members).
func (c *Cluster) Server() *Server {
	return &Server{t: c.t, Addr: c.Addr, Dir: c.Dir, cluster: c}
}

// StartClusterServer is StartCluster seen as one Server, for harnesses that take a
// func(testing.TB) *Server; the Cluster is Server.Cluster().
func StartClusterServer(t testing.TB) *Server { return StartCluster(t).Server() }

// Cluster returns the RAFT cluster behind a Server from StartClusterServer (nil
// for a standalone server).
func (s *Server) Cluster() *Cluster { return s.cluster }

// leaderConn is Conn for a cluster: a client of every member that talks to the
// leader only and reconnects (to the new leader) by itself.
func (c *Cluster) leaderConn(t testing.TB) client.Client {
	t.Helper()
	clientModel, err := nbdb.FullDatabaseModel()
	if err != nil {
		t.Fatal(err)
	}
	return Connect(context.Background(), t, c.Addr, clientModel, 15*time.Second, Reconnect(5*time.Second, 50*time.Millisecond, time.Second))
}

// MemberConn returns a connected client of member m alone (not leader-only: a
// follower answers reads from its own copy of the log), with every table
// monitored, to check that a member holds the same data as the leader.
func (m *Member) MemberConn(t testing.TB) client.Client {
	t.Helper()
	s := &Server{t: t, Addr: m.Addr}
	return s.Client(t)
}

// TransferLeadership makes the member, if leader, hand leadership to another
// member and go on as a follower, as a leader can do by itself (e.g. around log
// compaction) (`ovs-appctl cluster/failure-test transfer-leadership`).
func (m *Member) TransferLeadership() error {
	out, err := exec.Command("ovs-appctl", "-t", m.ctlFile(), "cluster/failure-test", "transfer-leadership").CombinedOutput()
	if err != nil {
		return fmt.Errorf("transfer-leadership on member %d: %w: %s", m.Index, err, out)
	}
	return nil
}
