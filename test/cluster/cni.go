package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
)

// CNIType is the CNI plugin's type (the name of its binary in the kubelets' CNI bin directory): clusterctl run under
// that name (a symbolic link) is the plugin.
const CNIType = "oeip-cni"

// cniConf is the plugin's network configuration (one per kubelet: the node differs).
type cniConf struct {
	types.NetConf
	StateDir string `json:"stateDir"`
	Node     string `json:"node"`
}

type cniK8sArgs struct {
	types.CommonArgs
	K8S_POD_NAMESPACE          types.UnmarshallableString //nolint:revive,stylecheck // CNI_ARGS key
	K8S_POD_NAME               types.UnmarshallableString //nolint:revive,stylecheck // CNI_ARGS key
	K8S_POD_INFRA_CONTAINER_ID types.UnmarshallableString //nolint:revive,stylecheck // CNI_ARGS key
	K8S_POD_UID                types.UnmarshallableString //nolint:revive,stylecheck // CNI_ARGS key
}

// cniConfList renders the CNI configuration of a node's kubelet (for containerd's conf_dir).
func cniConfList(stateDir, node string) ([]byte, error) {
	return json.MarshalIndent(map[string]any{
		"cniVersion": "1.0.0", "name": "ovn-egressip",
		"plugins": []map[string]any{{"type": CNIType, "stateDir": stateDir, "node": node}},
	}, "", "  ")
}

// cniInRootEnv marks the plugin's second run, inside the network namespace of ovs-vswitchd.
const cniInRootEnv = "OEIP_CNI_IN_ROOT"

// RunCNI is the CNI plugin (CNI 1.0; ADD, DEL, CHECK, VERSION): it wires a kubelet's pod sandbox into OVN with
// AttachPod, the same code that plumbs the harness's own pods, and undoes it with DetachPod. containerd runs it
// inside the node's network namespace; the OVS bridges are in the namespace of ovs-vswitchd, so it first runs itself
// again there (nsenter --net), with the same environment and configuration.
func RunCNI() {
	if os.Getenv(cniInRootEnv) == "" && os.Getenv("CNI_COMMAND") != "" && os.Getenv("CNI_COMMAND") != "VERSION" {
		os.Exit(reexecInOVSNetns())
	}
	skel.PluginMainFuncs(skel.CNIFuncs{Add: cniAdd, Del: cniDel, Check: cniCheck}, version.PluginSupports("1.0.0"),
		"ovn-egressip local cluster CNI plugin")
}

func reexecInOVSNetns() int {
	fail := func(err error) int {
		if perr := types.NewError(types.ErrInternal, "oeip-cni", err.Error()).Print(); perr != nil {
			fmt.Fprintf(os.Stderr, "oeip-cni: %v (printing the CNI error: %v)\n", err, perr)
		}
		return 1
	}
	stdin, err := readAll(os.Stdin)
	if err != nil {
		return fail(err)
	}
	var conf cniConf
	if err := json.Unmarshal(stdin, &conf); err != nil {
		return fail(fmt.Errorf("network configuration: %w", err))
	}
	pid, err := readPid(paths{dir: conf.StateDir}.pidfile("ovs-vswitchd"))
	if err != nil {
		return fail(fmt.Errorf("ovs-vswitchd of the cluster in %q: %w", conf.StateDir, err))
	}
	self, err := os.Executable()
	if err != nil {
		return fail(err)
	}
	cmd := exec.Command("nsenter", "--net=/proc/"+strconv.Itoa(pid)+"/ns/net", "--", self)
	cmd.Env = append(os.Environ(), cniInRootEnv+"=1", "OEIP_CNI_ARGV0="+CNIType)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(stdin), os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		return fail(err)
	}
	return 0
}

func readAll(f *os.File) ([]byte, error) {
	var b bytes.Buffer
	_, err := b.ReadFrom(f)
	return b.Bytes(), err
}

// IsCNIInvocation reports whether this process runs as the CNI plugin (argv[0] or the re-exec marker).
func IsCNIInvocation() bool {
	return filepath.Base(os.Args[0]) == CNIType || os.Getenv("OEIP_CNI_ARGV0") == CNIType
}

// cniRecordDir holds, per sandbox, the network namespace the plugin wired (for teardown) and, per pod, the sandbox
// that owns its logical switch port.
func (p paths) cniRecords() string { return filepath.Join(p.run(), "cni") }

func parseCNI(args *skel.CmdArgs) (cniConf, string, string, error) {
	var conf cniConf
	if err := json.Unmarshal(args.StdinData, &conf); err != nil {
		return conf, "", "", fmt.Errorf("network configuration: %w", err)
	}
	var ka cniK8sArgs
	if err := types.LoadArgs(args.Args, &ka); err != nil {
		return conf, "", "", fmt.Errorf("CNI_ARGS: %w", err)
	}
	ns, name := string(ka.K8S_POD_NAMESPACE), string(ka.K8S_POD_NAME)
	if ns == "" || name == "" {
		return conf, "", "", fmt.Errorf("CNI_ARGS %q names no pod (K8S_POD_NAMESPACE, K8S_POD_NAME)", args.Args)
	}
	if conf.StateDir == "" || conf.Node == "" {
		return conf, "", "", errors.New("network configuration: stateDir and node are required")
	}
	return conf, ns, name, nil
}

// sandboxNetnsName is the /run/netns name of a sandbox's namespace path (containerd makes them there).
func sandboxNetnsName(path string) (string, error) {
	dir, name := filepath.Split(filepath.Clean(path))
	dir = filepath.Clean(dir)
	if dir != "/run/netns" && dir != "/var/run/netns" {
		return "", fmt.Errorf("network namespace %q is not under /run/netns", path)
	}
	return name, nil
}

func cniAdd(args *skel.CmdArgs) error {
	conf, ns, name, err := parseCNI(args)
	if err != nil {
		return err
	}
	netns, err := sandboxNetnsName(args.Netns)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := Open(conf.StateDir)
	if err != nil {
		return err
	}
	defer c.Close()
	recs := c.p.cniRecords()
	if err := os.MkdirAll(recs, 0o755); err != nil {
		return err
	}
	// A pod has one sandbox at a time: a port left by an earlier sandbox of the same pod (its DEL never came) goes.
	if err := c.DetachPod(ctx, ns, name); err != nil {
		return fmt.Errorf("remove the earlier port of pod %s/%s: %w", ns, name, err)
	}
	if err := os.WriteFile(filepath.Join(recs, "sandbox-"+args.ContainerID), []byte(netns+"\n"), 0o644); err != nil {
		return err
	}
	pod, err := c.AttachPod(ctx, conf.Node, ns, name, netns, args.IfName)
	if err != nil {
		return errors.Join(err, c.DetachPod(context.WithoutCancel(ctx), ns, name))
	}
	if err := os.WriteFile(filepath.Join(recs, "pod-"+ns+"_"+name), []byte(args.ContainerID+"\n"), 0o644); err != nil {
		return err
	}
	n, err := c.Node(conf.Node)
	if err != nil {
		return err
	}
	zero := 0
	res := &current.Result{CNIVersion: conf.CNIVersion,
		Interfaces: []*current.Interface{{Name: args.IfName, Mac: pod.MAC, Sandbox: args.Netns}}}
	for i, f := range n.Families {
		res.IPs = append(res.IPs, &current.IPConfig{Interface: &zero,
			Address: net.IPNet{IP: pod.IPs[i].AsSlice(), Mask: net.CIDRMask(f.Subnet.Bits(), pod.IPs[i].BitLen())},
			Gateway: f.RouterIP.AsSlice()})
		def := netip.MustParsePrefix(plans[f.Family].defaultRoute)
		res.Routes = append(res.Routes, &types.Route{
			Dst: net.IPNet{IP: def.Addr().AsSlice(), Mask: net.CIDRMask(0, def.Addr().BitLen())}, GW: f.RouterIP.AsSlice()})
	}
	return types.PrintResult(res, conf.CNIVersion)
}

func cniDel(args *skel.CmdArgs) error {
	conf, ns, name, err := parseCNI(args)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p := paths{dir: conf.StateDir}
	owner, err := os.ReadFile(filepath.Join(p.cniRecords(), "pod-"+ns+"_"+name))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if strings.TrimSpace(string(owner)) == args.ContainerID {
		c, err := Open(conf.StateDir)
		if err != nil {
			return err
		}
		defer c.Close()
		if err := c.DetachPod(ctx, ns, name); err != nil {
			return err
		}
		_ = os.Remove(filepath.Join(p.cniRecords(), "pod-"+ns+"_"+name))
	}
	_ = os.Remove(filepath.Join(p.cniRecords(), "sandbox-"+args.ContainerID))
	return nil
}

func cniCheck(args *skel.CmdArgs) error {
	conf, ns, name, err := parseCNI(args)
	if err != nil {
		return err
	}
	p := paths{dir: conf.StateDir}
	owner, err := os.ReadFile(filepath.Join(p.cniRecords(), "pod-"+ns+"_"+name))
	if err != nil || strings.TrimSpace(string(owner)) != args.ContainerID {
		return fmt.Errorf("pod %s/%s: sandbox %s is not wired", ns, name, args.ContainerID)
	}
	st, err := readState(p)
	if err != nil {
		return fmt.Errorf("cluster in %s: %w", conf.StateDir, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if !ovsLinkExists(ctx, ovsNodeOf(st.layout(), conf.Node), podLink(ns, name)) {
		return fmt.Errorf("pod %s/%s: %s is missing", ns, name, podLink(ns, name))
	}
	return nil
}

// ovsLinkExists reports whether link, the OVS end of a veth, exists where attachPorts put it: in the root namespace
// (ovsNode "", the centralized layout) or in ovsNode's chassis namespace (the interconnect layout).
func ovsLinkExists(ctx context.Context, ovsNode, link string) bool {
	if ovsNode == "" {
		return linkExists(link)
	}
	_, err := run(ctx, "ip", "-n", ChassisNetnsName(ovsNode), "link", "show", "dev", link)
	return err == nil
}
