// Command prober is the served pod of the kubelet demo (contrib/kubelet/demo.sh): it asks the external host's echo
// server (test/cluster's echo-server: it answers "tcp-peer=<source IP it saw>") every -interval and prints one line per
// request: "<unix milliseconds> <sequence> <source the echo server saw>", or "... error <reason>" when the request
// failed. Built static and put in the oeip-prober image (contrib/kubelet/images.sh), so that containerd needs no
// registry.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

func main() {
	target := flag.String("target", "172.18.0.100:9000", "echo server address")
	interval := flag.Duration("interval", 20*time.Millisecond, "time between requests")
	timeout := flag.Duration("timeout", time.Second, "timeout of one request")
	flag.Parse()
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	out := bufio.NewWriter(os.Stdout)
	t := time.NewTicker(*interval)
	defer t.Stop()
	for seq := 1; ; seq++ {
		src, err := request(*target, *timeout)
		now := time.Now().UnixMilli()
		if err != nil {
			fmt.Fprintf(out, "%d %d error %s\n", now, seq, strings.ReplaceAll(err.Error(), "\n", " "))
		} else {
			fmt.Fprintf(out, "%d %d %s\n", now, seq, src)
		}
		_ = out.Flush()
		select {
		case <-stop:
			return
		case <-t.C:
		}
	}
}

func request(target string, timeout time.Duration) (string, error) {
	conn, err := net.DialTimeout("tcp", target, timeout)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(timeout))
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return "", err
	}
	_, src, ok := strings.Cut(strings.TrimSpace(line), "-peer=")
	if !ok {
		return "", fmt.Errorf("unexpected reply %q", line)
	}
	return src, nil
}
