package podrun

import (
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	corev1 "k8s.io/api/core/v1"
)

// Placement is what the caller decides about one pod; the rest comes from the pod template.
type Placement struct {
	Namespace, PodName, NodeName string
	// HostIP and PodIP are status.hostIP and status.podIP (for a hostNetwork pod, both the node's IP).
	HostIP, PodIP string
	// Netns is the network namespace (a path, /var/run/netns/NAME) of a hostNetwork pod; "" runs the pod in the
	// caller's network namespace (the host's).
	Netns string
	// APIServerHost and APIServerPort become KUBERNETES_SERVICE_HOST/PORT (rest.InClusterConfig reads them).
	APIServerHost, APIServerPort string
}

// ImageConfig is the runtime part of an image's config (ociimage unpack writes it as config.json).
type ImageConfig struct {
	User       string
	Env        []string
	Entrypoint []string
	Cmd        []string
	WorkingDir string
}

// ServiceAccountMountPath is where a kubelet mounts the pod's ServiceAccount token, CA and namespace.
const ServiceAccountMountPath = "/var/run/secrets/kubernetes.io/serviceaccount"

// defaultCapabilities are the capabilities a container runtime (containerd, CRI-O) gives a container that asks for
// none.
var defaultCapabilities = []string{"CHOWN", "DAC_OVERRIDE", "FSETID", "FOWNER", "MKNOD", "NET_RAW", "SETGID",
	"SETUID", "SETFCAP", "SETPCAP", "NET_BIND_SERVICE", "SYS_CHROOT", "KILL", "AUDIT_WRITE"}

// ContainerSpec is the OCI runtime spec of container c of pod: rootfs is the image's root (mounted read-only),
// volumes maps each of the pod's volume names to the host path a bind mount takes it from, and saDir is the host
// directory holding the ServiceAccount token ("" when the pod does not mount it). It fails on what a pod of ours
// may not use here (no hostNetwork, privileged, an unsupported env source) rather than run something else.
func ContainerSpec(pod corev1.PodSpec, c corev1.Container, img ImageConfig, rootfs string, pl Placement,
	volumes map[string]string, saDir string) (*specs.Spec, error) {
	if !pod.HostNetwork {
		return nil, fmt.Errorf("container %s: only hostNetwork pods run here (no CNI)", c.Name)
	}
	sc := c.SecurityContext
	if sc != nil && sc.Privileged != nil && *sc.Privileged {
		return nil, fmt.Errorf("container %s: privileged containers are not supported", c.Name)
	}
	env, err := containerEnv(pod, c, img, pl)
	if err != nil {
		return nil, err
	}
	args, err := commandLine(c, img, env)
	if err != nil {
		return nil, err
	}
	user, err := containerUser(pod, c, img)
	if err != nil {
		return nil, err
	}
	caps, err := capabilities(c)
	if err != nil {
		return nil, err
	}
	pc := &specs.LinuxCapabilities{Bounding: caps}
	if user.UID == 0 {
		pc.Effective, pc.Permitted = caps, caps
	}
	cwd := c.WorkingDir
	if cwd == "" {
		cwd = img.WorkingDir
	}
	if cwd == "" {
		cwd = "/"
	}
	mounts, err := containerMounts(pod, c, volumes, saDir)
	if err != nil {
		return nil, err
	}
	envList := make([]string, 0, len(env.order))
	for _, k := range env.order {
		envList = append(envList, k+"="+env.vals[k])
	}
	ns := []specs.LinuxNamespace{{Type: specs.PIDNamespace}, {Type: specs.IPCNamespace}, {Type: specs.UTSNamespace},
		{Type: specs.MountNamespace}}
	if pl.Netns != "" {
		ns = append(ns, specs.LinuxNamespace{Type: specs.NetworkNamespace, Path: pl.Netns})
	}
	res, err := resources(c)
	if err != nil {
		return nil, err
	}
	return &specs.Spec{
		Version: specs.Version,
		Process: &specs.Process{
			User: user, Args: args, Env: envList, Cwd: cwd, Capabilities: pc,
		},
		Root:     &specs.Root{Path: rootfs, Readonly: true},
		Hostname: pl.PodName,
		Mounts:   mounts,
		Linux: &specs.Linux{
			Namespaces:  ns,
			CgroupsPath: "/oeip-podrun/" + ID(pl, c.Name),
			Resources:   res,
			MaskedPaths: []string{"/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
				"/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/sys/firmware", "/proc/scsi"},
			ReadonlyPaths: []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"},
		},
	}, nil
}

// ID is the runc container ID of container name of the pod of pl.
func ID(pl Placement, name string) string {
	return pl.Namespace + "_" + pl.PodName + "_" + name
}

type envVars struct {
	order []string
	vals  map[string]string
}

func (e *envVars) set(k, v string) {
	if _, ok := e.vals[k]; !ok {
		e.order = append(e.order, k)
	}
	e.vals[k] = v
}

// containerEnv is the image's environment, then what a kubelet adds for the API server, then the container's env
// (values with $(VAR) references to earlier variables expanded, and the downward API fields our pods use).
func containerEnv(pod corev1.PodSpec, c corev1.Container, img ImageConfig, pl Placement) (*envVars, error) {
	env := &envVars{vals: map[string]string{}}
	for _, kv := range img.Env {
		k, v, _ := strings.Cut(kv, "=")
		env.set(k, v)
	}
	if pl.APIServerHost != "" {
		env.set("KUBERNETES_SERVICE_HOST", pl.APIServerHost)
		env.set("KUBERNETES_SERVICE_PORT", pl.APIServerPort)
	}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env.set(e.Name, expand(e.Value, env.vals))
		case e.ValueFrom.FieldRef != nil:
			var v string
			switch e.ValueFrom.FieldRef.FieldPath {
			case "spec.nodeName":
				v = pl.NodeName
			case "metadata.name":
				v = pl.PodName
			case "metadata.namespace":
				v = pl.Namespace
			case "status.hostIP":
				v = pl.HostIP
			case "status.podIP":
				v = pl.PodIP
			case "spec.serviceAccountName":
				v = serviceAccountName(pod)
			default:
				return nil, fmt.Errorf("container %s: env %s: fieldRef %q is not supported here", c.Name, e.Name, e.ValueFrom.FieldRef.FieldPath)
			}
			env.set(e.Name, v)
		default:
			return nil, fmt.Errorf("container %s: env %s: only value and fieldRef are supported here", c.Name, e.Name)
		}
	}
	return env, nil
}

// expand replaces $(VAR) by the value of VAR when VAR is defined and $$ by $, as a kubelet does in command, args
// and env values; an undefined reference stays as written.
func expand(s string, vals map[string]string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteString(s[i:])
				return b.String()
			}
			name := s[i+2 : i+2+end]
			if v, ok := vals[name]; ok {
				b.WriteString(v)
			} else {
				b.WriteString(s[i : i+3+end])
			}
			i += 2 + end
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}

func commandLine(c corev1.Container, img ImageConfig, env *envVars) ([]string, error) {
	cmd, args := c.Command, c.Args
	if len(cmd) == 0 {
		cmd = img.Entrypoint
		if len(args) == 0 {
			args = img.Cmd
		}
	}
	all := append(append([]string(nil), cmd...), args...)
	if len(all) == 0 {
		return nil, fmt.Errorf("container %s: no command and the image has no entrypoint", c.Name)
	}
	for i, a := range all {
		all[i] = expand(a, env.vals)
	}
	return all, nil
}

// containerUser is runAsUser/runAsGroup (container, then pod) over the image's numeric USER.
func containerUser(pod corev1.PodSpec, c corev1.Container, img ImageConfig) (specs.User, error) {
	var u specs.User
	if img.User != "" {
		us, gs, _ := strings.Cut(img.User, ":")
		uid, err := strconv.ParseUint(us, 10, 32)
		if err != nil {
			return u, fmt.Errorf("image user %q: only numeric users are supported", img.User)
		}
		u.UID = uint32(uid)
		if gs != "" {
			gid, err := strconv.ParseUint(gs, 10, 32)
			if err != nil {
				return u, fmt.Errorf("image user %q: only numeric groups are supported", img.User)
			}
			u.GID = uint32(gid)
		}
	}
	if psc := pod.SecurityContext; psc != nil {
		if psc.RunAsUser != nil {
			u.UID = uint32(*psc.RunAsUser)
		}
		if psc.RunAsGroup != nil {
			u.GID = uint32(*psc.RunAsGroup)
		}
	}
	if sc := c.SecurityContext; sc != nil {
		if sc.RunAsUser != nil {
			u.UID = uint32(*sc.RunAsUser)
		}
		if sc.RunAsGroup != nil {
			u.GID = uint32(*sc.RunAsGroup)
		}
		if sc.RunAsNonRoot != nil && *sc.RunAsNonRoot && u.UID == 0 {
			return u, fmt.Errorf("container %s: runAsNonRoot, but it would run as uid 0", c.Name)
		}
	}
	if psc := pod.SecurityContext; psc != nil && psc.RunAsNonRoot != nil && *psc.RunAsNonRoot && u.UID == 0 {
		return u, fmt.Errorf("container %s: runAsNonRoot (pod), but it would run as uid 0", c.Name)
	}
	return u, nil
}

// capabilities is the runtime's default set with the container's add and drop applied ("ALL" drops all).
func capabilities(c corev1.Container) ([]string, error) {
	set := map[string]bool{}
	for _, n := range defaultCapabilities {
		set[n] = true
	}
	if sc := c.SecurityContext; sc != nil && sc.Capabilities != nil {
		for _, d := range sc.Capabilities.Drop {
			if d == "ALL" {
				set = map[string]bool{}
				continue
			}
			delete(set, strings.TrimPrefix(string(d), "CAP_"))
		}
		for _, a := range sc.Capabilities.Add {
			if a == "ALL" {
				return nil, fmt.Errorf("container %s: capability ALL is not supported here", c.Name)
			}
			set[strings.TrimPrefix(string(a), "CAP_")] = true
		}
	}
	out := make([]string, 0, len(set))
	for n := range set {
		out = append(out, "CAP_"+n)
	}
	sort.Strings(out)
	return out, nil
}

func serviceAccountName(pod corev1.PodSpec) string {
	if pod.ServiceAccountName != "" {
		return pod.ServiceAccountName
	}
	return "default"
}

// MountsServiceAccount says whether a kubelet would mount the pod's ServiceAccount token.
func MountsServiceAccount(pod corev1.PodSpec) bool {
	return pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken
}

func containerMounts(pod corev1.PodSpec, c corev1.Container, volumes map[string]string, saDir string) ([]specs.Mount, error) {
	m := []specs.Mount{
		{Destination: "/proc", Type: "proc", Source: "proc"},
		{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
		{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}},
		{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
		{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue", Options: []string{"nosuid", "noexec", "nodev"}},
		{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
		{Destination: "/run", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "nodev", "mode=755"}},
		{Destination: "/tmp", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "nodev", "mode=1777"}},
	}
	for _, vm := range c.VolumeMounts {
		src, ok := volumes[vm.Name]
		if !ok {
			return nil, fmt.Errorf("container %s: volumeMount %s: no such volume in the pod", c.Name, vm.Name)
		}
		if vm.SubPath != "" {
			src = filepath.Join(src, vm.SubPath)
		}
		opts := []string{"rbind", "rprivate"}
		if vm.ReadOnly {
			opts = append(opts, "ro")
		}
		m = append(m, specs.Mount{Destination: vm.MountPath, Type: "bind", Source: src, Options: opts})
	}
	if saDir != "" {
		m = append(m, specs.Mount{Destination: ServiceAccountMountPath, Type: "bind", Source: saDir, Options: []string{"rbind", "ro"}})
	}
	return m, nil
}

// resources are the cgroup settings a kubelet derives from requests and limits: CPU shares from the CPU request,
// a CFS quota from the CPU limit, a memory limit.
func resources(c corev1.Container) (*specs.LinuxResources, error) {
	r := &specs.LinuxResources{CPU: &specs.LinuxCPU{}}
	shares := uint64(2)
	if q, ok := c.Resources.Requests[corev1.ResourceCPU]; ok {
		if s := uint64(q.MilliValue()) * 1024 / 1000; s > shares {
			shares = s
		}
	}
	r.CPU.Shares = &shares
	if q, ok := c.Resources.Limits[corev1.ResourceCPU]; ok {
		period := uint64(100000)
		quota := q.MilliValue() * int64(period) / 1000
		r.CPU.Period, r.CPU.Quota = &period, &quota
	}
	if q, ok := c.Resources.Limits[corev1.ResourceMemory]; ok {
		v := q.Value()
		r.Memory = &specs.LinuxMemory{Limit: &v}
	}
	return r, nil
}
