// Package apiserver starts private etcd + kube-apiserver v1.37.2 control planes for tests.
//
// It is a thin layer over controller-runtime's envtest (sigs.k8s.io/controller-runtime/pkg/envtest): envtest picks
// free loopback ports, generates certificates, starts and stops the processes and installs CRDs. This package adds
// what our tests need on top: the binaries come from our own per-machine cache (contrib/build-kube.sh, which builds
// kube-apiserver and kubectl v1.37.2 once) plus Debian's etcd, kube-apiserver gets the flags a loopback-only server
// needs, the CRDs of <repo>/dist/crds are applied, and everything is stopped by t.Cleanup.
//
// Several Envs may run at once in one process (each has its own ports and directories).
package apiserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// Env is one running control plane.
type Env struct {
	// Config is an admin (system:masters) client config for the apiserver.
	Config *rest.Config
	// Kubeconfig is the path of an admin kubeconfig file for the apiserver (certificates inline).
	Kubeconfig string
	// Kubectl is the path of a kubectl v1.37.2 binary.
	Kubectl string
	// Dir holds the kubeconfig and the etcd/apiserver logs. It is removed at cleanup unless the test failed.
	Dir string

	env *envtest.Environment
}

// Option changes how Start sets up the control plane.
type Option func(*options)

type options struct {
	crdDirs       []string
	apiserverArgs map[string][]string
	keepLogs      bool
	startTimeout  time.Duration
}

// WithCRDDirs applies the CRD manifests found in dirs as well as those of <repo>/dist/crds.
func WithCRDDirs(dirs ...string) Option {
	return func(o *options) { o.crdDirs = append(o.crdDirs, dirs...) }
}

// WithAPIServerFlag sets a kube-apiserver flag (name without dashes), replacing any value Start would pass.
func WithAPIServerFlag(name string, values ...string) Option {
	return func(o *options) { o.apiserverArgs[name] = values }
}

// WithStartTimeout bounds how long etcd and kube-apiserver each may take to become healthy (default 60 s).
func WithStartTimeout(d time.Duration) Option {
	return func(o *options) { o.startTimeout = d }
}

// WithKeptLogs keeps Dir (kubeconfig, etcd.log, kube-apiserver.log) after the test even when it passed.
func WithKeptLogs() Option {
	return func(o *options) { o.keepLogs = true }
}

// Start starts a private etcd + kube-apiserver v1.37.2 on loopback (free ports, its own temp dir), applies every CRD
// manifest found in <repo>/dist/crds (and any extra dirs in opts), waits until the CRDs are established, and
// registers t.Cleanup to stop everything. It builds or reuses the cached binaries (contrib/build-kube.sh).
// Any failure is fatal to t.
func Start(t testing.TB, opts ...Option) *Env {
	t.Helper()
	o := options{
		apiserverArgs: map[string][]string{
			// Loopback-only: the endpoint reconciler would publish 127.0.0.1 as the kubernetes service endpoint,
			// which the apiserver rejects; no controller needs the endpoints here.
			"endpoint-reconciler-type":     {"none"},
			"enable-priority-and-fairness": {"false"},
			// On SIGTERM, end open watches within a second (informers re-watch elsewhere), as a rolling upgrade
			// does; without it the server waits for its watch clients to go away (RestartAPIServer).
			"shutdown-watch-termination-grace-period": {"1s"},
		},
		startTimeout: 60 * time.Second,
	}
	for _, opt := range opts {
		opt(&o)
	}

	root, err := RepoRoot()
	if err != nil {
		t.Fatalf("apiserver: %v", err)
	}
	bins, err := ResolveBinaries(root)
	if err != nil {
		t.Fatalf("apiserver: %v", err)
	}

	dir, err := os.MkdirTemp("", "ovn-eip-apiserver-")
	if err != nil {
		t.Fatalf("apiserver: temp dir: %v", err)
	}
	e := &Env{Kubectl: bins.Kubectl, Dir: dir}
	logs, err := openLogs(dir)
	if err != nil {
		t.Fatalf("apiserver: %v", err)
	}

	te := &envtest.Environment{
		CRDDirectoryPaths:        append([]string{filepath.Join(root, "dist", "crds")}, o.crdDirs...),
		ErrorIfCRDPathMissing:    true,
		ControlPlaneStartTimeout: o.startTimeout,
		ControlPlaneStopTimeout:  20 * time.Second,
	}
	// Fixed data and certificate directories (not envtest's throw-away ones): RestartAPIServer and
	// RestartControlPlane bring the same etcd data, serving certificates and client CA back.
	etcdData, certDir := filepath.Join(dir, "etcd-data"), filepath.Join(dir, "apiserver-certs")
	for _, d := range []string{etcdData, certDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatalf("apiserver: %v", err)
		}
	}
	te.ControlPlane.Etcd = &envtest.Etcd{Path: bins.Etcd, Out: logs.etcd, Err: logs.etcd, DataDir: etcdData}
	api := te.ControlPlane.GetAPIServer()
	api.CertDir = certDir
	api.Path = bins.APIServer
	api.Out, api.Err = logs.apiserver, logs.apiserver
	for name, values := range o.apiserverArgs {
		api.Configure().Set(name, values...)
	}
	te.ControlPlane.KubectlPath = bins.Kubectl
	e.env = te

	cfg, err := te.Start()
	if err != nil {
		// envtest stops what it started on most failures; Stop again to be sure, it is idempotent.
		stopErr := te.Stop()
		logs.close()
		t.Fatalf("apiserver: start control plane (logs in %s): %v", dir, errors.Join(err, stopErr))
	}
	e.Config = cfg
	t.Cleanup(func() {
		if err := te.Stop(); err != nil {
			t.Errorf("apiserver: stop control plane: %v", err)
		}
		logs.close()
		if t.Failed() || o.keepLogs {
			t.Logf("apiserver: kept %s (kubeconfig, etcd.log, kube-apiserver.log)", dir)
			return
		}
		_ = os.RemoveAll(dir)
	})

	e.Kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(e.Kubeconfig, te.KubeConfig, 0o600); err != nil {
		t.Fatalf("apiserver: write kubeconfig: %v", err)
	}
	if err := waitNamespaceReady(cfg, 30*time.Second); err != nil {
		t.Fatalf("apiserver: %v", err)
	}
	return e
}

// RestartAPIServer stops kube-apiserver (SIGTERM, as an upgrade does), waits for down, sleeps for down (clients
// see connection refused meanwhile) and starts it again on the same port with the same certificates; etcd keeps
// running. It returns when the apiserver answers again. Failures are fatal to t.
func (e *Env) RestartAPIServer(t testing.TB, down time.Duration) {
	t.Helper()
	api := e.env.ControlPlane.GetAPIServer()
	if err := api.Stop(); err != nil {
		t.Fatalf("apiserver: stop kube-apiserver: %v", err)
	}
	time.Sleep(down)
	if err := api.Start(); err != nil {
		t.Fatalf("apiserver: restart kube-apiserver: %v", err)
	}
	if err := waitNamespaceReady(e.Config, 60*time.Second); err != nil {
		t.Fatalf("apiserver: after restart: %v", err)
	}
}

// RestartControlPlane stops kube-apiserver and etcd, waits for down, and starts etcd on its kept data directory and
// URL, then kube-apiserver as in RestartAPIServer: every object (and resourceVersion) comes back.
func (e *Env) RestartControlPlane(t testing.TB, down time.Duration) {
	t.Helper()
	api, etcd := e.env.ControlPlane.GetAPIServer(), e.env.ControlPlane.Etcd
	if err := api.Stop(); err != nil {
		t.Fatalf("apiserver: stop kube-apiserver: %v", err)
	}
	if err := etcd.Stop(); err != nil {
		t.Fatalf("apiserver: stop etcd: %v", err)
	}
	time.Sleep(down)
	if err := etcd.Start(); err != nil {
		t.Fatalf("apiserver: restart etcd: %v", err)
	}
	if err := api.Start(); err != nil {
		t.Fatalf("apiserver: restart kube-apiserver: %v", err)
	}
	if err := waitNamespaceReady(e.Config, 60*time.Second); err != nil {
		t.Fatalf("apiserver: after restart: %v", err)
	}
}

// waitNamespaceReady waits until the apiserver serves the default namespace to the admin config.
func waitNamespaceReady(cfg *rest.Config, timeout time.Duration) error {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	var last error
	err = wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, timeout, true,
		func(ctx context.Context) (bool, error) {
			_, last = cs.CoreV1().Namespaces().Get(ctx, metav1.NamespaceDefault, metav1.GetOptions{})
			return last == nil, nil
		})
	if err != nil {
		return fmt.Errorf("apiserver not answering within %s: %w", timeout, last)
	}
	return nil
}

type logFiles struct{ etcd, apiserver *os.File }

func openLogs(dir string) (*logFiles, error) {
	etcd, err := os.Create(filepath.Join(dir, "etcd.log"))
	if err != nil {
		return nil, err
	}
	api, err := os.Create(filepath.Join(dir, "kube-apiserver.log"))
	if err != nil {
		etcd.Close()
		return nil, err
	}
	return &logFiles{etcd: etcd, apiserver: api}, nil
}

func (l *logFiles) close() {
	for _, f := range []io.Closer{l.etcd, l.apiserver} {
		_ = f.Close()
	}
}
