package cluster

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A pidfile older than the process now holding its pid (the daemon died and the
// pid was reused) must not get that process signalled; a current one must.
func TestStalePidfileIsNotSignalled(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		if err := cmd.Wait(); err != nil {
			t.Logf("the daemon after kill: %v", err)
		}
	})
	pidFile := filepath.Join(t.TempDir(), "daemon.pid")
	if err := os.WriteFile(pidFile, []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	old := time.Now().Add(-time.Minute)
	if err := os.Chtimes(pidFile, old, old); err != nil {
		t.Fatal(err)
	}
	if pid, err := readPid(pidFile); err == nil {
		t.Fatalf("readPid of a pidfile written a minute before its process started = %d, want an error", pid)
	}
	if pid := signalPidfile(pidFile, syscall.SIGTERM); pid != 0 {
		t.Fatalf("signalPidfile signalled %d through a stale pidfile", pid)
	}
	if !alive(cmd.Process.Pid) {
		t.Fatal("the process behind a stale pidfile was killed")
	}

	now := time.Now()
	if err := os.Chtimes(pidFile, now, now); err != nil {
		t.Fatal(err)
	}
	if pid, err := readPid(pidFile); err != nil || pid != cmd.Process.Pid {
		t.Fatalf("readPid of a current pidfile = %d, %v; want %d", pid, err, cmd.Process.Pid)
	}
	started, ok := processStart(os.Getpid())
	if !ok || started.After(time.Now()) || time.Since(started) > 24*time.Hour {
		t.Fatalf("processStart(self) = %v, %v", started, ok)
	}
}

// The tap devices an ovs-vswitchd leaves behind when it crashes are removed
// before a cluster starts, when no ovs-vswitchd runs.
func TestOrphanTapsRemoved(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	if processRunning("ovs-vswitchd") || linkExists(BrEx) {
		t.Skip("an OVS data plane runs on this machine")
	}
	if out, err := exec.Command("ip", "tuntap", "add", "dev", BrEx, "mode", "tap").CombinedOutput(); err != nil {
		t.Fatalf("create a persistent tap %s: %v %s", BrEx, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "link", "del", BrEx).CombinedOutput(); err != nil {
			t.Logf("clean-up: ip link del %s: %v %s", BrEx, err, out)
		}
	})
	if err := removeOrphanTaps(); err != nil {
		t.Fatal(err)
	}
	if linkExists(BrEx) {
		t.Fatalf("%s left over from a gone ovs-vswitchd was not removed", BrEx)
	}
}

// Tearing down a namespace this very process is dialing from (its main thread
// inside it for a moment) must not signal this process: seen as an e2e run
// ending with "signal: terminated" while a prober dialed from a pod.
func TestDeleteNetnsSparesItself(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	const name = NetnsPrefix + "t-self"
	if err := exec.Command("ip", "netns", "del", name).Run(); err == nil { // an error: there is none to remove
		t.Logf("removed %s, left by an earlier run that was killed", name)
	}
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			t.Logf("clean-up (the test may have removed it): ip netns del %s: %v %s", name, err, out)
		}
	})
	var enterErr, leaveErr error
	onMainThread(func() {
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			enterErr = err
			return
		}
		defer orig.Close()
		target, err := os.Open("/run/netns/" + name)
		if err != nil {
			enterErr = err
			return
		}
		defer target.Close()
		if enterErr = unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); enterErr != nil {
			return
		}
		// The main thread is in the namespace while it is torn down from another one.
		done := make(chan error)
		go func() { done <- deleteNetns(context.Background(), name) }()
		if err := <-done; err != nil {
			t.Errorf("deleteNetns: %v", err)
		}
		leaveErr = unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET)
	})
	if enterErr != nil || leaveErr != nil {
		t.Fatalf("enter %v, leave %v", enterErr, leaveErr)
	}
	// Still here: the SIGTERM that `ip netns pids` would have aimed at this process was not sent.
}
