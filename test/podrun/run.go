package podrun

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/vishvananda/netns"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
)

// Runtime starts pods with runc. Its state (runc's, the unpacked images, the pods' volumes and logs) is under Dir.
type Runtime struct {
	Dir string
	// Images maps an image name as the manifests write it (ovn-egressip:latest) to its OCI archive.
	Images map[string]string
	// OCIImage is the path of the ociimage tool (make image builds it into _output/bin).
	OCIImage string
	// Kube is an admin client of the API server: ConfigMaps are read from it and ServiceAccount tokens requested
	// from it (TokenRequest), as a kubelet does.
	Kube kubernetes.Interface
	// CA is the API server's CA certificate (PEM), written as ca.crt beside the token.
	CA []byte
	// LogDir holds one log per container, <container ID>.log; "" means Dir/log.
	LogDir string

	mu     sync.Mutex
	rootfs map[string]imageRoot // by archive path
}

type imageRoot struct {
	dir string
	cfg ImageConfig
}

// Pod is one started pod.
type Pod struct {
	Placement Placement
	rt        *Runtime
	spec      corev1.PodSpec
	ctrs      []*container
}

type container struct {
	id   string
	spec corev1.Container
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// Cleanup deletes every container runc knows under dir (a previous run that was not stopped).
func Cleanup(dir string) error {
	root := filepath.Join(dir, "runc")
	out, err := exec.Command("runc", "--root", root, "list", "-q").Output()
	if err != nil {
		return fmt.Errorf("runc list under %s: %w", root, err)
	}
	var errs []error
	for _, id := range strings.Fields(string(out)) {
		if out, err := exec.Command("runc", "--root", root, "delete", "-f", id).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("runc delete %s: %w: %s", id, err, out))
		}
	}
	// runc leaves the empty parent cgroups of its containers; one still in use (another runtime's) stays.
	parents, err := filepath.Glob("/sys/fs/cgroup/*/oeip-podrun")
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	for _, p := range parents {
		children, err := filepath.Glob(filepath.Join(p, "*_*"))
		if err != nil {
			errs = append(errs, err)
		}
		for _, c := range children {
			if st, err := os.Stat(c); err == nil && st.IsDir() {
				_ = os.Remove(c)
			}
		}
		_ = os.Remove(p)
	}
	return errors.Join(errs...)
}

func (r *Runtime) runc(args ...string) *exec.Cmd {
	return exec.Command("runc", append([]string{"--root", filepath.Join(r.Dir, "runc")}, args...)...)
}

// image unpacks an archive once (by content) and returns its root and config.
func (r *Runtime) image(name string) (imageRoot, error) {
	archive, ok := r.Images[name]
	if !ok {
		return imageRoot{}, fmt.Errorf("image %s: no archive for it (make image)", name)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if ir, ok := r.rootfs[archive]; ok {
		return ir, nil
	}
	f, err := os.Open(archive)
	if err != nil {
		return imageRoot{}, fmt.Errorf("image %s: %w (make image)", name, err)
	}
	h := sha256.New()
	_, err = io.Copy(h, f)
	f.Close()
	if err != nil {
		return imageRoot{}, err
	}
	dir := filepath.Join(r.Dir, "images", hex.EncodeToString(h.Sum(nil))[:16])
	if _, err := os.Stat(filepath.Join(dir, "config.json")); err != nil {
		if out, err := exec.Command(r.OCIImage, "unpack", archive, dir).CombinedOutput(); err != nil {
			return imageRoot{}, fmt.Errorf("unpack %s: %w: %s", archive, err, out)
		}
	}
	data, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return imageRoot{}, err
	}
	var cfg ImageConfig
	if err := json.Unmarshal(data, &cfg); err != nil {
		return imageRoot{}, fmt.Errorf("image %s config: %w", name, err)
	}
	ir := imageRoot{dir: filepath.Join(dir, "rootfs"), cfg: cfg}
	if r.rootfs == nil {
		r.rootfs = map[string]imageRoot{}
	}
	r.rootfs[archive] = ir
	return ir, nil
}

// Start starts every container of the workload's pod template at pl, with logs in LogDir/<container ID>.log.
func (r *Runtime) Start(ctx context.Context, w *Workload, pl Placement) (*Pod, error) {
	if pl.Namespace == "" {
		pl.Namespace = w.Namespace
	}
	spec := w.Template.Spec
	podDir := filepath.Join(r.Dir, "pods", pl.Namespace+"_"+pl.PodName)
	if err := os.RemoveAll(podDir); err != nil {
		return nil, err
	}
	volumes, err := r.volumes(ctx, pl.Namespace, spec, podDir)
	if err != nil {
		return nil, err
	}
	saDir := ""
	if MountsServiceAccount(spec) {
		if saDir, err = r.serviceAccount(ctx, pl.Namespace, serviceAccountName(spec), pl.NodeName, podDir); err != nil {
			return nil, err
		}
	}
	p := &Pod{Placement: pl, rt: r, spec: spec}
	for _, c := range spec.Containers {
		ir, err := r.image(c.Image)
		if err != nil {
			return nil, errors.Join(err, p.Stop(5*time.Second))
		}
		s, err := ContainerSpec(spec, c, ir.cfg, ir.dir, pl, volumes, saDir)
		if err != nil {
			return nil, errors.Join(err, p.Stop(5*time.Second))
		}
		id := ID(pl, c.Name)
		bundle := filepath.Join(podDir, "bundle-"+c.Name)
		if err := os.MkdirAll(bundle, 0o755); err != nil {
			return nil, err
		}
		data, err := json.MarshalIndent(s, "", "  ")
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(bundle, "config.json"), data, 0o644); err != nil {
			return nil, err
		}
		// A container left with this id by an earlier run (runc delete -f of none succeeds).
		if out, err := r.runc("delete", "-f", id).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("runc delete %s: %w: %s", id, err, out)
		}
		logDir := r.LogDir
		if logDir == "" {
			logDir = filepath.Join(r.Dir, "log")
		}
		if err := os.MkdirAll(logDir, 0o755); err != nil {
			return nil, err
		}
		logf, err := os.OpenFile(filepath.Join(logDir, id+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return nil, err
		}
		cmd := r.runc("run", "--bundle", bundle, id)
		cmd.Stdout, cmd.Stderr = logf, logf
		// Its own process group: signals meant for the test's group do not reach runc; Stop and Kill go through runc.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			logf.Close()
			return nil, fmt.Errorf("runc run %s: %w", id, err)
		}
		ct := &container{id: id, spec: c, cmd: cmd, done: make(chan struct{})}
		go func() { ct.err = cmd.Wait(); logf.Close(); close(ct.done) }()
		p.ctrs = append(p.ctrs, ct)
	}
	return p, nil
}

// volumes writes the pod's configMap volumes (read from the API server) under podDir and prepares its hostPath
// volumes; it returns the host path of each volume.
func (r *Runtime) volumes(ctx context.Context, namespace string, spec corev1.PodSpec, podDir string) (map[string]string, error) {
	out := map[string]string{}
	for _, v := range spec.Volumes {
		switch {
		case v.ConfigMap != nil:
			cm, err := r.Kube.CoreV1().ConfigMaps(namespace).Get(ctx, v.ConfigMap.Name, metav1.GetOptions{})
			if err != nil {
				return nil, fmt.Errorf("volume %s: ConfigMap %s/%s: %w", v.Name, namespace, v.ConfigMap.Name, err)
			}
			dir := filepath.Join(podDir, "volumes", v.Name)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return nil, err
			}
			items := v.ConfigMap.Items
			if len(items) == 0 {
				for k := range cm.Data {
					items = append(items, corev1.KeyToPath{Key: k, Path: k})
				}
			}
			for _, it := range items {
				val, ok := cm.Data[it.Key]
				if !ok {
					return nil, fmt.Errorf("volume %s: ConfigMap %s/%s has no key %s", v.Name, namespace, cm.Name, it.Key)
				}
				p := filepath.Join(dir, it.Path)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					return nil, err
				}
				if err := os.WriteFile(p, []byte(val), 0o644); err != nil {
					return nil, err
				}
			}
			out[v.Name] = dir
		case v.HostPath != nil:
			p := v.HostPath.Path
			if v.HostPath.Type != nil {
				switch *v.HostPath.Type {
				case corev1.HostPathFileOrCreate:
					f, err := os.OpenFile(p, os.O_CREATE|os.O_RDONLY, 0o644)
					if err != nil {
						return nil, fmt.Errorf("volume %s: %w", v.Name, err)
					}
					f.Close()
				case corev1.HostPathDirectoryOrCreate:
					if err := os.MkdirAll(p, 0o755); err != nil {
						return nil, fmt.Errorf("volume %s: %w", v.Name, err)
					}
				}
			}
			if _, err := os.Stat(p); err != nil {
				return nil, fmt.Errorf("volume %s: hostPath: %w", v.Name, err)
			}
			out[v.Name] = p
		default:
			return nil, fmt.Errorf("volume %s: only configMap and hostPath volumes are supported here", v.Name)
		}
	}
	return out, nil
}

// serviceAccount asks the API server for a token of the ServiceAccount (TokenRequest, one hour) and writes what a
// kubelet projects: token, ca.crt, namespace. A kubelet's tokens carry the name of its Node (requests made with
// them have authentication.kubernetes.io/node-name, which the node-writes admission policy of dist/manifests
// requires): with no Pod object to bind to here, the token is bound to the Node named node when it exists.
func (r *Runtime) serviceAccount(ctx context.Context, namespace, name, node, podDir string) (string, error) {
	exp := int64(3600)
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp}}
	if node != "" {
		if n, err := r.Kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{}); err == nil {
			req.Spec.BoundObjectRef = &authenticationv1.BoundObjectReference{Kind: "Node", APIVersion: "v1", Name: n.Name, UID: n.UID}
		} else if !apierrors.IsNotFound(err) {
			return "", fmt.Errorf("node %s for the token of ServiceAccount %s/%s: %w", node, namespace, name, err)
		}
	}
	tr, err := r.Kube.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, req, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token of ServiceAccount %s/%s: %w", namespace, name, err)
	}
	dir := filepath.Join(podDir, "serviceaccount")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	for f, data := range map[string][]byte{"token": []byte(tr.Status.Token), "ca.crt": r.CA, "namespace": []byte(namespace)} {
		if err := os.WriteFile(filepath.Join(dir, f), data, 0o644); err != nil {
			return "", err
		}
	}
	return dir, nil
}

// Signal sends sig to every container's main process (runc kill). A container that has exited is skipped.
func (p *Pod) Signal(sig syscall.Signal) error {
	var errs []error
	for _, c := range p.ctrs {
		errs = append(errs, p.rt.kill(c, strconv.Itoa(int(sig))))
	}
	return errors.Join(errs...)
}

// kill is runc kill of container c with signal sig; an error only if c has not exited (runc run returns within a
// second of its container's end).
func (r *Runtime) kill(c *container, sig string) error {
	out, err := r.runc("kill", c.id, sig).CombinedOutput()
	if err == nil {
		return nil
	}
	select {
	case <-c.done:
		return nil // exited: there was nothing to signal
	case <-time.After(time.Second):
		return fmt.Errorf("runc kill %s %s: %w: %s", c.id, sig, err, out)
	}
}

// Stop stops the pod as a kubelet does: SIGTERM, then SIGKILL after grace; then it deletes the containers.
func (p *Pod) Stop(grace time.Duration) error {
	return errors.Join(p.Signal(syscall.SIGTERM), p.waitOrKill(grace))
}

// Kill kills the pod's processes at once (SIGKILL), as a crash would, and deletes the containers.
func (p *Pod) Kill() error {
	return errors.Join(p.Signal(syscall.SIGKILL), p.waitOrKill(10*time.Second))
}

func (p *Pod) waitOrKill(grace time.Duration) error {
	var errs []error
	deadline := time.After(grace)
	for _, c := range p.ctrs {
		select {
		case <-c.done:
		case <-deadline:
			errs = append(errs, p.rt.kill(c, "KILL"))
			<-c.done
		}
		if out, err := p.rt.runc("delete", "-f", c.id).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("runc delete %s: %w: %s", c.id, err, out))
		}
	}
	return errors.Join(errs...)
}

// Exited is closed when every container of the pod has exited.
func (p *Pod) Exited() <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		for _, c := range p.ctrs {
			<-c.done
		}
		close(ch)
	}()
	return ch
}

// ContainerIDs are the runc IDs of the pod's containers.
func (p *Pod) ContainerIDs() []string {
	var ids []string
	for _, c := range p.ctrs {
		ids = append(ids, c.id)
	}
	return ids
}

// WaitReady polls every container's readiness probe (httpGet or tcpSocket, at the probe's host or the pod IP, as a
// kubelet does) until it passes, a container exits, or ctx ends. A container without a readiness probe is ready
// once started.
func (p *Pod) WaitReady(ctx context.Context) error {
	for _, c := range p.ctrs {
		pr := c.spec.ReadinessProbe
		if pr == nil {
			continue
		}
		var last error
		for {
			if last = p.probe(ctx, c.spec, pr); last == nil {
				break
			}
			select {
			case <-c.done:
				//nolint:errorlint // c.err is the exit status, nil for exit 0: %v prints <nil>; the cause is the failed probe
				return fmt.Errorf("container %s exited before it was ready (%v): %w", c.id, c.err, last)
			case <-ctx.Done():
				return fmt.Errorf("container %s not ready: %w", c.id, last)
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	return nil
}

// Probe runs the container's readiness probe once.
func (p *Pod) probe(ctx context.Context, c corev1.Container, pr *corev1.Probe) error {
	host := p.Placement.PodIP
	if host == "" {
		host = "127.0.0.1"
	}
	timeout := time.Duration(pr.TimeoutSeconds) * time.Second
	if timeout == 0 {
		timeout = time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	switch {
	case pr.HTTPGet != nil:
		g := pr.HTTPGet
		if g.Host != "" {
			host = g.Host
		}
		port, err := portOf(c, g.Port)
		if err != nil {
			return err
		}
		scheme := strings.ToLower(string(g.Scheme))
		if scheme == "" {
			scheme = "http"
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+"://"+net.JoinHostPort(host, strconv.Itoa(port))+g.Path, nil)
		if err != nil {
			return err
		}
		hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true,
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) { return p.dial(ctx, network, addr) }}}
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode < 200 || resp.StatusCode >= 400 {
			body, err := io.ReadAll(io.LimitReader(resp.Body, 512))
			if err != nil {
				return fmt.Errorf("GET %s: %d (reading the body: %w)", req.URL, resp.StatusCode, err)
			}
			return fmt.Errorf("GET %s: %d %s", req.URL, resp.StatusCode, strings.TrimSpace(string(body)))
		}
		return nil
	case pr.TCPSocket != nil:
		if pr.TCPSocket.Host != "" {
			host = pr.TCPSocket.Host
		}
		port, err := portOf(c, pr.TCPSocket.Port)
		if err != nil {
			return err
		}
		conn, err := p.dial(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(port)))
		if err != nil {
			return err
		}
		return conn.Close()
	default:
		return errors.New("only httpGet and tcpSocket probes are supported here")
	}
}

// dial connects from the pod's network namespace, where the kubelet of its node would probe from (our nodes are
// network namespaces): the socket is made on a thread inside it.
func (p *Pod) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if p.Placement.Netns == "" {
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}
	type result struct {
		c   net.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		// The thread stays locked (and is dropped when the goroutine ends) if it cannot be put back.
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			ch <- result{err: err}
			return
		}
		defer orig.Close()
		target, err := netns.GetFromPath(p.Placement.Netns)
		if err != nil {
			ch <- result{err: err}
			return
		}
		defer target.Close()
		if err := netns.Set(target); err != nil {
			ch <- result{err: err}
			return
		}
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if netns.Set(orig) == nil {
			runtime.UnlockOSThread()
		}
		ch <- result{c, err}
	}()
	r := <-ch
	return r.c, r.err
}

func portOf(c corev1.Container, p intstr.IntOrString) (int, error) {
	if p.Type == intstr.Int {
		return p.IntValue(), nil
	}
	for _, cp := range c.Ports {
		if cp.Name == p.StrVal {
			return int(cp.ContainerPort), nil
		}
	}
	return 0, fmt.Errorf("container %s: no port named %q", c.Name, p.StrVal)
}
