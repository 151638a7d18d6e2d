package nbserver

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/nbdb"
)

// The ovsdb-server processes of a standalone Server and of a Cluster's members: started, waited for and stopped the
// same way.

// needTools skips t when one of bins is not in PATH.
func needTools(t testing.TB, bins ...string) {
	t.Helper()
	for _, bin := range bins {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("%s not found in PATH (install Debian ovn-central / openvswitch-common): %v", bin, err)
		}
	}
}

// writeSchema writes the NB schema into dir and returns its path.
func writeSchema(t testing.TB, dir string) string {
	t.Helper()
	schemaPath := filepath.Join(dir, "ovn-nb.ovsschema")
	schema, err := json.Marshal(nbdb.Schema())
	if err != nil {
		t.Fatalf("marshal NB schema: %v", err)
	}
	if err := os.WriteFile(schemaPath, schema, 0o644); err != nil {
		t.Fatal(err)
	}
	return schemaPath
}

// startOvsdbServer starts `ovsdb-server args...` with its run, database and log directory dir; waited is closed when
// it has exited. what names it in a failure.
func startOvsdbServer(t testing.TB, what, dir string, args []string) (cmd *exec.Cmd, waited chan struct{}) {
	t.Helper()
	cmd = exec.Command("ovsdb-server", args...)
	cmd.Env = append(os.Environ(), "OVS_RUNDIR="+dir, "OVS_DBDIR="+dir, "OVS_LOGDIR="+dir)
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", what, err)
	}
	waited = make(chan struct{})
	go func() { _ = cmd.Wait(); close(waited) }() //nolint:errcheck // reaping only: callers see the end on waited
	return cmd, waited
}

// waitSocket waits until socket accepts connections (10 s at most; then t fails with what and the log at logFile).
func waitSocket(t testing.TB, what, socket, logFile string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		conn, err := net.Dial("unix", socket)
		if err == nil {
			_ = conn.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s on %s not ready after 10 s: %v\n%s", what, socket, err, logText(logFile))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// stopProcess sends sig to cmd (nil: nothing to stop) and waits for it to exit (SIGKILL after 5 s), then removes
// its socket.
func stopProcess(cmd *exec.Cmd, waited <-chan struct{}, sig syscall.Signal, socket string) {
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-waited:
	case <-time.After(5 * time.Second):
		_ = cmd.Process.Kill()
		<-waited
	}
	_ = os.Remove(socket)
}

// logText is the text of a server's log file for a failure message (or why it cannot be read).
func logText(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(log %s: %v)", path, err)
	}
	return string(b)
}
