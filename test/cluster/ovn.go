package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// ovsEnv points the OVS/OVN tools at the cluster's run, db and log directories (ovn-controller finds br-int.mgmt
// through OVS_RUNDIR; its control socket is OVN_RUNDIR/ovn-controller.<pid>.ctl since 23.03 has no --unixctl).
func ovsEnv(p paths) []string {
	return []string{"OVS_RUNDIR=" + p.run(), "OVN_RUNDIR=" + p.run(), "OVS_DBDIR=" + p.db(), "OVS_LOGDIR=" + p.log()}
}

func runOVS(ctx context.Context, p paths, name string, args ...string) (string, error) {
	return runWith(ctx, ovsEnv(p), "", name, args...)
}

// vsctl runs ovs-vsctl against the cluster's Open_vSwitch database.
func vsctl(ctx context.Context, p paths, args ...string) (string, error) {
	return run(ctx, ovs("ovs-vsctl"), append([]string{"--db=unix:" + p.ovsSock(), "--timeout=20"}, args...)...)
}

// startOVNCentral creates the NB and SB databases and starts their ovsdb-servers (unix sockets for clients; a
// standalone NB also on APIServerIP:NBTCPPort; NB as a 3-member RAFT cluster when nb is NBRaft) and ovn-northd.
func startOVNCentral(ctx context.Context, p paths, nb string) error {
	dbs := []string{"nb", "sb"}
	if nb == NBRaft {
		dbs = []string{"sb"}
		if err := createNBRaft(ctx, p, "/usr/share/ovn/ovn-nb.ovsschema"); err != nil {
			return err
		}
		for i := 0; i < NBRaftMembers; i++ {
			if err := startNBMember(ctx, p, i); err != nil {
				return err
			}
		}
		fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := waitNBRaftFormed(fctx, p)
		cancel()
		if err != nil {
			return err
		}
	}
	for _, db := range dbs {
		file := filepath.Join(p.db(), "ovn"+db+".db")
		if _, err := run(ctx, "ovsdb-tool", "create", file, "/usr/share/ovn/ovn-"+db+".ovsschema"); err != nil {
			return err
		}
		args := []string{file, "--detach", "--no-chdir",
			"--pidfile=" + p.pidfile("ovn"+db+"_db"), "--log-file=" + filepath.Join(p.log(), "ovsdb-server-"+db+".log"),
			"--remote=punix:" + filepath.Join(p.run(), "ovn"+db+"_db.sock"),
			"--unixctl=" + filepath.Join(p.run(), "ovn"+db+"_db.ctl")}
		if db == "nb" {
			args = append(args, fmt.Sprintf("--remote=ptcp:%d:%s", NBTCPPort, APIServerIP))
		}
		if _, err := run(ctx, "ovsdb-server", args...); err != nil {
			return err
		}
	}
	_, err := run(ctx, "ovn-northd", "--detach", "--no-chdir", "--pidfile="+p.pidfile("ovn-northd"),
		"--log-file="+filepath.Join(p.log(), "ovn-northd.log"),
		"--ovnnb-db="+p.nbAddress(nb), "--ovnsb-db=unix:"+p.sbSock(),
		"--unixctl="+filepath.Join(p.run(), "ovn-northd.ctl"))
	return err
}

// startOVS starts the Open_vSwitch database and ovs-vswitchd (userspace datapath; no kernel module needed), creates
// br-ex and configures the chassis, then starts ovn-controller, which creates br-int.
func startOVS(ctx context.Context, p paths) error {
	if err := startVswitchd(ctx, p); err != nil {
		return err
	}
	if _, err := vsctl(ctx, p, "add-br", BrEx, "--", "set", "bridge", BrEx, "datapath_type=netdev",
		"--", "set", "open_vswitch", ".",
		"external_ids:system-id="+Chassis,
		"external_ids:ovn-remote=unix:"+p.sbSock(),
		"external_ids:ovn-encap-type=geneve",
		"external_ids:ovn-encap-ip=127.0.0.1",
		"external_ids:ovn-bridge="+BrInt,
		"external_ids:ovn-bridge-datapath-type=netdev",
		"external_ids:ovn-bridge-mappings="+PhysNet+":"+BrEx); err != nil {
		return err
	}
	if _, err := runOVS(ctx, p, "ovn-controller", "unix:"+p.ovsSock(), "--detach", "--no-chdir",
		"--pidfile="+p.pidfile("ovn-controller"), "--log-file="+filepath.Join(p.log(), "ovn-controller.log")); err != nil {
		return err
	}
	return poll(ctx, 50*time.Millisecond, func() (bool, error) {
		_, err := vsctl(ctx, p, "br-exists", BrInt)
		return err == nil, nil
	})
}

// startVswitchd starts the Open_vSwitch database and ovs-vswitchd (userspace datapath; no kernel module needed).
func startVswitchd(ctx context.Context, p paths) error {
	conf := filepath.Join(p.db(), "conf.db")
	if _, err := run(ctx, ovs("ovsdb-tool"), "create", conf, ovsTools().Schema); err != nil {
		return err
	}
	if _, err := runOVS(ctx, p, ovs("ovsdb-server"), conf, "--detach", "--no-chdir",
		"--pidfile="+p.pidfile("ovsdb-server"), "--log-file="+filepath.Join(p.log(), "ovsdb-server.log"),
		"--remote=punix:"+p.ovsSock(), "--unixctl="+filepath.Join(p.run(), "ovsdb-server.ctl")); err != nil {
		return err
	}
	if _, err := vsctl(ctx, p, "--no-wait", "init"); err != nil {
		return err
	}
	// --monitor: a monitor process restarts ovs-vswitchd if it crashes (Debian bookworm's OVS 3.1 userspace conntrack,
	// the fallback when contrib/build-ovs.sh has not built ours, aborts on an assertion under NAT churn); the bridges
	// and OpenFlow connections come back.
	if _, err := runOVS(ctx, p, ovs("ovs-vswitchd"), "unix:"+p.ovsSock(), "--detach", "--monitor", "--no-chdir",
		"--pidfile="+p.pidfile("ovs-vswitchd"), "--log-file="+filepath.Join(p.log(), "ovs-vswitchd.log"),
		"--unixctl="+filepath.Join(p.run(), "ovs-vswitchd.ctl")); err != nil {
		return err
	}
	return nil
}

// stopOVN stops ovn-controller, northd, ovs-vswitchd and the ovsdb-servers recorded in p's pidfiles, deleting the
// bridges first. It returns the pids it signalled, and an error when the zones could not be listed.
func stopOVN(ctx context.Context, p paths) ([]int, error) {
	var pids []int
	if pid, err := readPid(p.pidfile("ovn-controller")); err == nil && alive(pid) {
		ctl := filepath.Join(p.run(), fmt.Sprintf("ovn-controller.%d.ctl", pid))
		if _, err := run(ctx, "ovn-appctl", "-t", ctl, "exit"); err != nil {
			_ = syscall.Kill(pid, syscall.SIGTERM)
		}
		pids = append(pids, pid)
	}
	pids = append(pids, appctlExit(ctx, p, "ovn-northd", "ovn-appctl"))
	zonePids, zonesErr := stopZones(ctx, p) // the interconnect layout's zones (nothing in the centralized one)
	pids = append(pids, zonePids...)
	if _, err := os.Stat(p.ovsSock()); err == nil {
		if pid, err := readPid(p.pidfile("ovs-vswitchd")); err == nil && alive(pid) {
			// The bridges go first so that ovs-vswitchd removes their taps; teardown then removes and checks what
			// is left of them (its link clean-up reports an interface it cannot remove).
			_, _ = vsctl(ctx, p, "--timeout=5", "--if-exists", "del-br", BrInt, "--", "--if-exists", "del-br", BrEx) //nolint:errcheck // best effort: teardown checks what is left
		}
	}
	pids = append(pids, appctlExit(ctx, p, "ovs-vswitchd", ovs("ovs-appctl")))
	pids = append(pids, appctlExit(ctx, p, "ovsdb-server", ovs("ovs-appctl")))
	for _, d := range []string{nbMemberName(0), nbMemberName(1), nbMemberName(2), "ovnsb_db"} {
		pids = append(pids, appctlExit(ctx, p, d, "ovs-appctl")) // OVN's databases: Debian's tools
	}
	return pids, zonesErr
}

// appctlExit asks the daemon with pidfile name to exit through its control socket (SIGTERM if that fails).
func appctlExit(ctx context.Context, p paths, name, tool string) int {
	pid, err := readPid(p.pidfile(name))
	if err != nil || !alive(pid) {
		return 0
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := run(ctx, tool, "-t", filepath.Join(p.run(), name+".ctl"), "exit"); err != nil {
		_ = syscall.Kill(pid, syscall.SIGTERM)
	}
	return pid
}
