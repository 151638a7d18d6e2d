package cluster

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// A pidfile older than the process now holding its pid (the daemon died and the
// pid was reused) must not get that process signalled; a current one must.
func TestStalePidfileIsNotSignalled(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
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
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", BrEx).Run() })
	if err := removeOrphanTaps(); err != nil {
		t.Fatal(err)
	}
	if linkExists(BrEx) {
		t.Fatalf("%s left over from a gone ovs-vswitchd was not removed", BrEx)
	}
}
