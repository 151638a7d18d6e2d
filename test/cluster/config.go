package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
)

// Layouts of the OVN control plane (Config.Layout, CLUSTER_LAYOUT).
const (
	// LayoutCentralized: one NB, one SB, one ovn-northd and one ovn-controller (chassis Chassis) hold every node.
	LayoutCentralized = "centralized"
	// LayoutInterconnect: every node is its own OVN zone (upstream OVN-Kubernetes' layout): its own NB, SB,
	// ovn-northd and chassis, the zones joined by the transit switch over Geneve (interconnect.go).
	LayoutInterconnect = "interconnect"
)

// Names shared by the harness and the docs.
const (
	// NetnsPrefix starts the name of every network namespace and root-namespace interface the harness creates.
	NetnsPrefix = "oeip-"
	// HarnessKey is the external_ids key (value "true") on every NB row the harness writes, and the label on the Node
	// objects it creates, so that the product's sync never mistakes them for its own.
	HarnessKey = "ovn-egressip-harness"
	// Chassis is the system-id of the single ovn-controller; every GR_<node> has options:chassis set to it.
	Chassis = "oeip-chassis"
	// PhysNet is the localnet network name mapped to br-ex.
	PhysNet = "physnet"
	// BrInt and BrEx are the OVS bridges (only one OVN data plane can run per machine).
	BrInt = "br-int"
	BrEx  = "br-ex"
	// APIServerPort is the secure port of kube-apiserver on APIServerIP.
	APIServerPort = 6443
	// NBTCPPort is the NB database's TCP port on APIServerIP (besides its unix socket), for an ovnkube master that
	// runs in a container (OVNKUBE_FROM=image), as a cluster's NB is reached.
	NBTCPPort = 6641
	// ExternalNetns is the external host's network namespace.
	ExternalNetns = NetnsPrefix + "ext"
	// hostPortSwitch is the logical switch of the root namespace's port into OVN.
	hostPortSwitch = "ovn-eip-host"
)

// Config describes a cluster to bring up.
type Config struct {
	// StateDir holds every file of the cluster (pidfiles, sockets, databases, certs, logs, kubeconfig).
	StateDir string
	// Nodes is the number of nodes (1..MaxNodes), named node1..nodeN.
	Nodes int
	// GatewayMode is ovnkube's --gateway-mode ("" = gwmode.Shared).
	GatewayMode gwmode.Mode
	// IPFamily is FamilyIPv4 (default), FamilyIPv6 (IPv6-only) or FamilyDual (dual-stack: IPv4 primary).
	IPFamily string
	// NB is NBStandalone (default) or NBRaft (centralized layout only).
	NB string
	// Layout is LayoutCentralized (default) or LayoutInterconnect (standalone NB; with or without kubelets).
	Layout string
	// RepoRoot is the ovn-egressip checkout (for dist/crds and contrib/build-kube.sh); empty = found from the
	// working directory.
	RepoRoot string
	// Helper is the clusterctl binary that runs the node heartbeat agent and the echo server as daemons; empty =
	// built into <RepoRoot>/_output/bin/clusterctl (while the rest comes up).
	Helper string
	// Kubelets: also run kube-controller-manager, kube-scheduler, and per node a containerd and a kubelet inside the
	// node's namespace (kubelets.go); the kubelets report the nodes. Needs the binaries of contrib/build-kube.sh with
	// KUBE_EXTRA and the image archives in Images.
	Kubelets bool
	// Images is the directory of the OCI archives imported into the kubelets' containerd (KubeletImages); empty =
	// <RepoRoot>/_output/images.
	Images string
	// Logf receives progress lines (may be nil).
	Logf func(format string, args ...any)
}

// eitherOr sets *v to def when it is empty, and says what is wrong when it is neither def nor other.
func eitherOr(v *string, what, def, other string) error {
	if *v == "" {
		*v = def
	}
	if *v != def && *v != other {
		return fmt.Errorf("cluster: %s %q is neither %q nor %q", what, *v, def, other)
	}
	return nil
}

func (c *Config) setDefaults() error {
	if c.StateDir == "" {
		return errors.New("cluster: StateDir is required")
	}
	abs, err := filepath.Abs(c.StateDir)
	if err != nil {
		return err
	}
	c.StateDir = abs
	if c.Nodes == 0 {
		c.Nodes = 3
	}
	if c.Nodes < 1 || c.Nodes > MaxNodes {
		return fmt.Errorf("cluster: %d nodes out of range 1..%d", c.Nodes, MaxNodes)
	}
	if c.GatewayMode == "" {
		c.GatewayMode = gwmode.Shared
	}
	if _, err := gwmode.Parse(string(c.GatewayMode)); err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	if c.IPFamily == "" {
		c.IPFamily = FamilyIPv4
	}
	if Families(c.IPFamily) == nil {
		return fmt.Errorf("cluster: IP family %q is none of %s, %s, %s", c.IPFamily, FamilyIPv4, FamilyIPv6, FamilyDual)
	}
	if err := eitherOr(&c.NB, "NB layout", NBStandalone, NBRaft); err != nil {
		return err
	}
	if err := eitherOr(&c.Layout, "layout", LayoutCentralized, LayoutInterconnect); err != nil {
		return err
	}
	if c.Layout == LayoutInterconnect && c.NB != NBStandalone {
		return fmt.Errorf("cluster: the %s layout runs one standalone NB per zone", LayoutInterconnect)
	}
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
	return nil
}

// paths of a state directory.
type paths struct{ dir string }

func (p paths) run() string             { return filepath.Join(p.dir, "run") }
func (p paths) db() string              { return filepath.Join(p.dir, "db") }
func (p paths) log() string             { return filepath.Join(p.dir, "log") }
func (p paths) pki() string             { return filepath.Join(p.dir, "pki") }
func (p paths) bin() string             { return filepath.Join(p.dir, "bin") }
func (p paths) etcdData() string        { return filepath.Join(p.dir, "etcd") }
func (p paths) kubeconfig() string      { return filepath.Join(p.dir, "kubeconfig") }
func (p paths) stateFile() string       { return filepath.Join(p.dir, "cluster.json") }
func (p paths) nbSock() string          { return filepath.Join(p.run(), "ovnnb_db.sock") }
func (p paths) sbSock() string          { return filepath.Join(p.run(), "ovnsb_db.sock") }
func (p paths) ovsSock() string         { return filepath.Join(p.run(), "db.sock") }
func (p paths) pidfile(n string) string { return filepath.Join(p.run(), n+".pid") }
func (p paths) ipamLock() string        { return filepath.Join(p.run(), "ipam.lock") }

// The interconnect layout's per-zone files: run/<node>/ and db/<node>/ (pidfile names "<node>/<daemon>").
func (p paths) zoneRun(node string) string    { return filepath.Join(p.run(), node) }
func (p paths) zoneDB(node string) string     { return filepath.Join(p.db(), node) }
func (p paths) zoneNBSock(node string) string { return filepath.Join(p.zoneRun(node), "ovnnb_db.sock") }
func (p paths) zoneSBSock(node string) string { return filepath.Join(p.zoneRun(node), "ovnsb_db.sock") }

// State is what a running cluster records in StateDir/cluster.json; Open reads it back.
type State struct {
	Nodes       int         `json:"nodes"`
	GatewayMode gwmode.Mode `json:"gatewayMode"`
	IPFamily    string      `json:"ipFamily,omitempty"` // "" (written before dual-stack support) = FamilyIPv4
	// NB is the NB layout (NBStandalone or NBRaft; empty in a state file from before it existed: standalone).
	NB         string `json:"nb,omitempty"`
	Kubeconfig string `json:"kubeconfig"`
	NBAddress  string `json:"nbAddress"`
	SBAddress  string `json:"sbAddress"`
	OVSDB      string `json:"ovsdb"`
	APIServer  string `json:"apiServer"`
	EtcdURL    string `json:"etcdURL"`
	Kubectl    string `json:"kubectl"`
	// Kubelets: the cluster runs kubelets (Config.Kubelets).
	Kubelets bool `json:"kubelets,omitempty"`
	// Layout is Config.Layout ("" in a state file from before it existed, and in the centralized layout: centralized).
	Layout string `json:"layout,omitempty"`
}

// layout is the OVN layout of the state.
func (s State) layout() string {
	if s.Layout == "" {
		return LayoutCentralized
	}
	return s.Layout
}

// nbLayout is the NB layout of the state (a state file from before the field existed is standalone).
func (s State) nbLayout() string {
	if s.NB == "" {
		return NBStandalone
	}
	return s.NB
}

func readState(p paths) (State, error) {
	var s State
	data, err := os.ReadFile(p.stateFile())
	if err != nil {
		return s, err
	}
	if err := json.Unmarshal(data, &s); err != nil {
		return s, fmt.Errorf("%s: %w", p.stateFile(), err)
	}
	if s.IPFamily == "" {
		s.IPFamily = FamilyIPv4
	}
	return s, nil
}

func writeState(p paths, s State) error {
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(p.stateFile(), append(data, '\n'), 0o644)
}
