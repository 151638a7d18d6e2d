package cluster

import (
	"os"
	"runtime"
	"testing"
)

// The main goroutine stays on the process's main thread, so that a test can run
// code there (onMainThread): `ip netns pids` goes by the main thread.
func init() { runtime.LockOSThread() }

var mainThread = make(chan func())

func TestMain(m *testing.M) {
	done := make(chan int)
	go func() { done <- m.Run() }()
	for {
		select {
		case f := <-mainThread:
			f()
		case code := <-done:
			os.Exit(code)
		}
	}
}

// onMainThread runs f on the process's main thread and waits for it.
func onMainThread(f func()) {
	finished := make(chan struct{})
	mainThread <- func() { defer close(finished); f() }
	<-finished
}
