package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/ovn-egressip/ovn-egressip/test/ports"
)

// startEtcd starts etcd on free loopback ports with its data in p.etcdData() and returns its client URL.
func startEtcd(p paths, etcdBin string) (string, error) {
	client, err := ports.FreeLoopback()
	if err != nil {
		return "", err
	}
	peer, err := ports.FreeLoopback()
	if err != nil {
		return "", err
	}
	curl := "http://127.0.0.1:" + strconv.Itoa(client)
	purl := "http://127.0.0.1:" + strconv.Itoa(peer)
	_, err = startDaemon(p.pidfile("etcd"), filepath.Join(p.log(), "etcd.log"), nil, etcdBin,
		"--name", "ovn-egressip", "--data-dir", p.etcdData(),
		"--listen-client-urls", curl, "--advertise-client-urls", curl,
		"--listen-peer-urls", purl, "--initial-advertise-peer-urls", purl,
		"--initial-cluster", "ovn-egressip="+purl,
		"--quota-backend-bytes", "2147483648", "--unsafe-no-fsync=true")
	return curl, err
}

// startAPIServer starts kube-apiserver on ip:APIServerPort (APIServerIP, or APIServerIP6 in IPv6-only clusters)
// against etcdURL.
// With kubelets, the Node authorizer and NodeRestriction admit the kubelets' node identities, and the apiserver
// reaches the kubelets (logs, exec) with the admin certificate.
func startAPIServer(p paths, k pki, bin, etcdURL string, ip netip.Addr, kubelets bool) error {
	authz := []string{"--authorization-mode=RBAC"}
	if kubelets {
		authz = []string{"--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction",
			"--kubelet-client-certificate=" + k.path("admin.crt"), "--kubelet-client-key=" + k.path("admin.key"),
			"--kubelet-preferred-address-types=InternalIP"}
	}
	args := append([]string{bin,
		"--etcd-servers=" + etcdURL,
		"--bind-address=" + ip.String(), "--advertise-address=" + ip.String(),
		"--secure-port=" + strconv.Itoa(APIServerPort),
		"--tls-cert-file=" + k.path("apiserver.crt"), "--tls-private-key-file=" + k.path("apiserver.key"),
		"--client-ca-file=" + k.path("ca.crt"),
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + k.path("sa.key"),
		"--service-account-signing-key-file=" + k.path("sa.key"),
		"--service-cluster-ip-range=" + serviceCIDR(ip),
		"--allow-privileged=true",
		"--enable-priority-and-fairness=false",
		// the endpoints of the kubernetes service are not needed: no kube-proxy runs (the kubelet mode DNATs the
		// Service address in each node, kubelets.go)
		"--endpoint-reconciler-type=none",
		// On SIGTERM, end open watches (informers watch again) rather than wait for them: without it the HTTP server's
		// graceful shutdown waits for every watch stream (up to --request-timeout, 60 s) and RestartAPIServer had to
		// SIGKILL it after 20 s, so "0 to 2 s down" was 21 s down.
		"--shutdown-watch-termination-grace-period=1s",
	}, authz...)
	_, err := startDaemon(p.pidfile("kube-apiserver"), filepath.Join(p.log(), "kube-apiserver.log"), nil, args...)
	return err
}

// serviceCIDR is the service range of the family of the apiserver's address (kube-apiserver wants them alike).
func serviceCIDR(apiServer netip.Addr) string {
	if apiServer.Is4() {
		return "10.96.0.0/16"
	}
	return "fd00:10:96::/112"
}

// waitHTTPReady polls url (with the admin client cert) until it answers 200 "ok", a process dies, or ctx ends.
func waitAPIServerReady(ctx context.Context, p paths, k pki, server string) error {
	ca, err := os.ReadFile(k.path("ca.crt"))
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	cert, err := tls.LoadX509KeyPair(k.path("admin.crt"), k.path("admin.key"))
	if err != nil {
		return err
	}
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}}}}
	defer hc.CloseIdleConnections()
	url := server + "/readyz"
	var last string
	err = poll(ctx, 100*time.Millisecond, func() (bool, error) {
		for _, d := range []string{"etcd", "kube-apiserver"} {
			pid, err := readPid(p.pidfile(d))
			if err != nil || !alive(pid) {
				return false, fmt.Errorf("%s exited: %s", d, lastLogLine(filepath.Join(p.log(), d+".log")))
			}
		}
		resp, err := hc.Get(url)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			last = err.Error()
			return false, nil
		}
		last = fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(body)))
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil && ctx.Err() != nil {
		return fmt.Errorf("kube-apiserver not ready (last answer: %s)", last)
	}
	return err
}

// lastLogLine returns the last non-empty line of a log file (for one-line failure causes).
func lastLogLine(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return "no log"
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}
