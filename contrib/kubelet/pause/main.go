// Command pause is the pod sandbox's process for the local kubelets (contrib/kubelet): it waits for SIGTERM or
// SIGINT and exits. Built static and put in the oeip-pause image, so that containerd needs no registry.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGINT, syscall.SIGTERM)
	<-c
}
