package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// NB database layouts (Config.NB, CLUSTER_NB).
const (
	// NBStandalone is one ovsdb-server for NB.
	NBStandalone = "standalone"
	// NBRaft is NB as a 3-member RAFT cluster, as OVN is deployed: northd, ovnkube and the harness are given the
	// comma-separated list of members and talk to the leader.
	NBRaft = "raft"
	// NBRaftMembers is the size of the NB RAFT cluster.
	NBRaftMembers = 3
	// nbRaftPortBase is the loopback TCP port of member 0's RAFT connections (member i: base+i). RAFT only runs
	// over tcp: or ssl:; clients use each member's unix socket.
	nbRaftPortBase = 16641
)

// nbMemberName is the pidfile/socket/control-socket name of NB member i: member 0 keeps the standalone names.
func nbMemberName(i int) string {
	if i == 0 {
		return "ovnnb_db"
	}
	return fmt.Sprintf("ovnnb_db%d", i)
}

func (p paths) nbMemberSock(i int) string { return filepath.Join(p.run(), nbMemberName(i)+".sock") }
func (p paths) nbMemberCtl(i int) string  { return filepath.Join(p.run(), nbMemberName(i)+".ctl") }
func (p paths) nbMemberDB(i int) string   { return filepath.Join(p.db(), nbMemberName(i)+".db") }
func nbRaftAddr(i int) string             { return fmt.Sprintf("tcp:127.0.0.1:%d", nbRaftPortBase+i) }

// nbAddress is the client address list of the NB database of layout nb.
func (p paths) nbAddress(nb string) string {
	if nb != NBRaft {
		return "unix:" + p.nbSock()
	}
	var a []string
	for i := 0; i < NBRaftMembers; i++ {
		a = append(a, "unix:"+p.nbMemberSock(i))
	}
	return strings.Join(a, ",")
}

// createNBRaft creates the members' database files: member 0 with `ovsdb-tool create-cluster`, the others with
// `ovsdb-tool join-cluster` (they join when they start).
func createNBRaft(ctx context.Context, p paths, schema string) error {
	for i := 0; i < NBRaftMembers; i++ {
		args := []string{"create-cluster", p.nbMemberDB(i), schema, nbRaftAddr(i)}
		if i > 0 {
			args = []string{"join-cluster", p.nbMemberDB(i), "OVN_Northbound", nbRaftAddr(i), nbRaftAddr(0)}
		}
		if _, err := run(ctx, "ovsdb-tool", args...); err != nil {
			return err
		}
	}
	return nil
}

// startNBMember starts the ovsdb-server of NB member i (detached, pidfile, unix socket, control socket).
func startNBMember(ctx context.Context, p paths, i int) error {
	name := nbMemberName(i)
	_, err := run(ctx, "ovsdb-server", p.nbMemberDB(i), "--detach", "--no-chdir",
		"--pidfile="+p.pidfile(name), "--log-file="+filepath.Join(p.log(), "ovsdb-server-"+name+".log"),
		"--remote=punix:"+p.nbMemberSock(i), "--unixctl="+p.nbMemberCtl(i))
	return err
}

// nbMemberStatus is `ovs-appctl cluster/status OVN_Northbound` of member i.
func nbMemberStatus(ctx context.Context, p paths, i int) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return run(ctx, "ovs-appctl", "-t", p.nbMemberCtl(i), "cluster/status", "OVN_Northbound")
}

func statusField(status, name string) string {
	for _, line := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(line, name+": "); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// waitNBRaftFormed waits until every running member is a cluster member and one of them is leader.
func waitNBRaftFormed(ctx context.Context, p paths) error {
	var last error
	err := poll(ctx, 50*time.Millisecond, func() (bool, error) {
		leaders := 0
		for i := 0; i < NBRaftMembers; i++ {
			if pid, err := readPid(p.pidfile(nbMemberName(i))); err != nil || !alive(pid) {
				continue
			}
			s, err := nbMemberStatus(ctx, p, i)
			if err != nil {
				last = err
				return false, nil
			}
			if st := statusField(s, "Status"); st != "cluster member" {
				last = fmt.Errorf("NB member %d: status %q", i, st)
				return false, nil
			}
			if statusField(s, "Role") == "leader" {
				leaders++
			}
		}
		if leaders != 1 {
			last = fmt.Errorf("%d NB RAFT leaders", leaders)
			return false, nil
		}
		return true, nil
	})
	if err != nil && last != nil {
		return fmt.Errorf("NB RAFT cluster not formed: %w", last)
	}
	return err
}

// NBRaft reports whether the cluster's NB is a RAFT cluster.
func (c *Cluster) NBRaft() bool { return c.st.nbLayout() == NBRaft }

// NBMembers is the number of NB ovsdb-servers (1 for a standalone NB).
func (c *Cluster) NBMembers() int {
	if c.NBRaft() {
		return NBRaftMembers
	}
	return 1
}

// NBLeader returns the index of the NB RAFT member that is leader now, waiting up to 15 s for an election.
func (c *Cluster) NBLeader(ctx context.Context) (int, error) {
	if !c.NBRaft() {
		return 0, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	leader := -1
	err := poll(ctx, 50*time.Millisecond, func() (bool, error) {
		for i := 0; i < NBRaftMembers; i++ {
			if !c.NBMemberRunning(i) {
				continue
			}
			if s, err := nbMemberStatus(ctx, c.p, i); err == nil && statusField(s, "Role") == "leader" {
				leader = i
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return -1, fmt.Errorf("no NB RAFT leader: %w", err)
	}
	return leader, nil
}

// NBMemberRunning reports whether NB member i's ovsdb-server runs.
func (c *Cluster) NBMemberRunning(i int) bool {
	pid, err := readPid(c.p.pidfile(nbMemberName(i)))
	return err == nil && alive(pid)
}

// KillNBMember kills NB member i with SIGKILL and waits for it to exit (its database file stays).
func (c *Cluster) KillNBMember(i int) error {
	pid, err := readPid(c.p.pidfile(nbMemberName(i)))
	if err != nil {
		return err
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill NB member %d (pid %d): %w", i, pid, err)
	}
	for deadline := time.Now().Add(5 * time.Second); alive(pid); {
		if time.Now().After(deadline) {
			return fmt.Errorf("NB member %d (pid %d) still alive 5 s after SIGKILL", i, pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
	_ = os.Remove(c.p.pidfile(nbMemberName(i)))
	_ = os.Remove(c.p.nbMemberSock(i))
	return nil
}

// StartNBMember starts a stopped NB member again on its database file and waits until it is back in the cluster.
func (c *Cluster) StartNBMember(ctx context.Context, i int) error {
	if err := startNBMember(ctx, c.p, i); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return waitNBRaftFormed(ctx, c.p)
}
