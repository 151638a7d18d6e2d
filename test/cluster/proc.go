package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// run runs a command and returns its stdout; the error carries the command and its stderr.
func run(ctx context.Context, name string, args ...string) (string, error) {
	return runWith(ctx, nil, "", name, args...)
}

// runWith is run with extra environment variables and stdin.
func runWith(ctx context.Context, env []string, stdin, name string, args ...string) (string, error) {
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, oneLine(errb.String()))
	}
	return out.String(), nil
}

// oneLine joins the lines of a command's stderr so that an error stays on one line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(strings.TrimSpace(s), "\n", " | ")), " ")
}

// startDaemon starts argv as a daemon in its own session with output in logFile and records its pid in pidFile.
// The process outlives the caller; stopPidfile ends it.
func startDaemon(pidFile, logFile string, env []string, argv ...string) (int, error) {
	lf, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return 0, err
	}
	defer lf.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("start %s: %w", argv[0], err)
	}
	pid := cmd.Process.Pid
	// Reap the child if it exits while we are still running, so it does not linger as a zombie.
	go func() { _ = cmd.Wait() }() //nolint:errcheck // reaping only: the harness reads a daemon's end from its pidfile and log
	if err := os.WriteFile(pidFile, []byte(strconv.Itoa(pid)+"\n"), 0o644); err != nil {
		_ = cmd.Process.Kill()
		return 0, err
	}
	return pid, nil
}

func readPid(pidFile string) (int, error) {
	data, err := os.ReadFile(pidFile)
	if err != nil {
		return 0, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 1 {
		return 0, fmt.Errorf("bad pidfile %s", pidFile)
	}
	// pid_max is often 32768, so the pid of a daemon that died (a crash, a reboot) is soon reused by some
	// unrelated process: never hand that one out to be signalled.
	if st, err := os.Stat(pidFile); err == nil {
		if started, ok := processStart(pid); ok && started.After(st.ModTime().Add(2*time.Second)) {
			return 0, fmt.Errorf("stale pidfile %s: pid %d now belongs to a process started %s after it was written",
				pidFile, pid, started.Sub(st.ModTime()).Round(time.Second))
		}
	}
	return pid, nil
}

// processRunning reports whether a process whose command name (/proc/PID/comm) is comm runs on this machine.
func processRunning(comm string) bool {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return true // cannot tell: assume it does
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if data, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); err == nil && strings.TrimSpace(string(data)) == comm && alive(pid) {
			return true
		}
	}
	return false
}

// processStart returns when pid started (from /proc/PID/stat and the boot time in /proc/stat; USER_HZ is 100
// on Linux), false when pid does not exist or /proc cannot be read.
func processStart(pid int) (time.Time, bool) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return time.Time{}, false
	}
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return time.Time{}, false
	}
	fields := strings.Fields(string(data[i+1:])) // fields 3.. of proc(5): starttime (22) is index 19
	if len(fields) < 20 {
		return time.Time{}, false
	}
	ticks, err := strconv.ParseInt(fields[19], 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	stat, err := os.ReadFile("/proc/stat")
	if err != nil {
		return time.Time{}, false
	}
	for _, line := range strings.Split(string(stat), "\n") {
		if v, ok := strings.CutPrefix(line, "btime "); ok {
			btime, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return time.Time{}, false
			}
			const userHZ = 100
			return time.Unix(btime, 0).Add(time.Duration(ticks) * time.Second / userHZ), true
		}
	}
	return time.Time{}, false
}

// alive reports whether pid runs and is not a zombie.
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// state is the field after the ")" closing the command name
	if i := bytes.LastIndexByte(data, ')'); i > 0 && i+2 < len(data) {
		return data[i+2] != 'Z'
	}
	return true
}

// signalPidfile sends sig to the process named by pidFile (if any) and returns its pid (0 if none).
func signalPidfile(pidFile string, sig syscall.Signal) int {
	pid, err := readPid(pidFile)
	if err != nil || !alive(pid) {
		return 0
	}
	_ = syscall.Kill(pid, sig)
	return pid
}

// waitGone waits until every pid has exited, SIGKILLs the rest after timeout, and reports those still alive.
func waitGone(pids []int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var left []int
		for _, p := range pids {
			if p > 0 && alive(p) {
				left = append(left, p)
			}
		}
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			for _, p := range left {
				_ = syscall.Kill(p, syscall.SIGKILL)
			}
			time.Sleep(200 * time.Millisecond)
			var still []string
			for _, p := range left {
				if alive(p) {
					still = append(still, strconv.Itoa(p))
				}
			}
			if len(still) > 0 {
				return fmt.Errorf("processes still alive after SIGKILL: %s", strings.Join(still, " "))
			}
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// poll calls f every interval until it returns true or an error, or ctx ends.
func poll(ctx context.Context, interval time.Duration, f func() (bool, error)) error {
	for {
		ok, err := f()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(interval):
		}
	}
}

var errNotRoot = errors.New("the local cluster needs root (network namespaces, OVS, iptables)")
