// Package config holds ovnkube's settings: command-line flags (urfave/cli/v2) and
// the same settings from an INI config file (--config-file, sections as
// OVN-Kubernetes uses them). Flags win over the file; the file wins over defaults.
// Load returns an immutable Config; nothing here is package-level mutable state.
package config

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/netip"
	"os"
	"reflect"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	"gopkg.in/gcfg.v1"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/ovsdbaddr"
)

// Config is the validated set of settings for one ovnkube process.
type Config struct {
	// InitMaster runs the master (assignment, status, NB rows).
	InitMaster bool
	// MasterNode is the node name given to --init-master (as upstream
	// OVN-Kubernetes takes it); "" when the flag is given without one. It names
	// the master in its Lease.
	MasterNode string
	// InitNode is the Node name the node daemon runs for ("" = no node daemon).
	InitNode string
	// InitClusterManager runs the interconnect layout's cluster manager
	// (assignment, status, conditions, Events; no NB); ClusterManagerNode is the
	// node name given to it ("" when none), which names it in its Lease.
	InitClusterManager bool
	ClusterManagerNode string
	// InitZone is the node whose zone the zone controller programs
	// (--init-ovnkube-controller NODE; "" = none): the interconnect layout, one zone
	// per node, the zone's own NB at --nb-address.
	InitZone string
	// EgressIPEnable turns the egress IP feature on; when false no EgressIP
	// informer, handler or health server starts.
	EgressIPEnable bool
	// GatewayMode is the gateway mode (gwmode.Parse'd).
	GatewayMode gwmode.Mode
	// GatewayInterface is the node's gateway interface ("" = the default route's).
	GatewayInterface string
	// NBAddresses are the OVN Northbound endpoints (tcp:HOST:PORT, ssl:HOST:PORT, unix:PATH).
	NBAddresses []string
	// NBClientPrivKey, NBClientCert and NBClientCACert are the PEM files of the
	// client's TLS identity and of the CA that signed the NB server's certificate;
	// NBCertCommonName is the name the server's certificate must carry ("" = the
	// host of the address). Required when an NB address is ssl:.
	NBClientPrivKey, NBClientCert, NBClientCACert, NBCertCommonName string
	// NBTLS is the TLS configuration built from them when an NB address is ssl:
	// (nil otherwise). Callers must not modify it.
	NBTLS *tls.Config
	// Kubeconfig is the path of the kubeconfig file ("" = in-cluster config).
	Kubeconfig string
	// ClusterSubnets are the pod networks (the host-subnet length suffix "/24" of
	// OVN-Kubernetes' "10.244.0.0/16/24" form is accepted and dropped).
	ClusterSubnets []netip.Prefix
	// JoinSubnets are the join switch networks (default 100.64.0.0/16).
	JoinSubnets []netip.Prefix
	// HealthCheckPort is the node's gRPC egress health port; 0 = legacy TCP check on port 9.
	HealthCheckPort int
	// ReachabilityTotalTimeout bounds one health probe of a node.
	ReachabilityTotalTimeout time.Duration
	// ReachabilityInterval is the time between two health probes of a node.
	ReachabilityInterval time.Duration
	// NodeResyncInterval is how often the node daemon re-applies host state to repair drift.
	NodeResyncInterval time.Duration
	// NodeReleaseLinger is how long a node keeps the SNAT rules of an egress IP that
	// moved away, and of a pod on another node an egress IP held here stops serving
	// (local gateway mode); 0 turns it off.
	NodeReleaseLinger time.Duration
	// MetricsBindAddress is host:port for /metrics ("" = no metrics server).
	MetricsBindAddress string
	// EnablePprof serves Go's /debug/pprof/ handlers on PprofBindAddress.
	EnablePprof bool
	// PprofBindAddress is host:port for /debug/pprof/ (default loopback only).
	PprofBindAddress string
	// LogLevel is the klog verbosity.
	LogLevel int
	// LeaderElection, when true, makes the master take a coordination.k8s.io Lease before acting.
	LeaderElection bool
	// LeaderElectionNamespace and LeaderElectionName name the Lease.
	LeaderElectionNamespace, LeaderElectionName string
	// LeaderElectionLeaseDuration, RenewDeadline and RetryPeriod tune client-go leader election.
	LeaderElectionLeaseDuration, LeaderElectionRenewDeadline, LeaderElectionRetryPeriod time.Duration
	// NBConnectTimeout bounds the start-up wait for the NB database.
	NBConnectTimeout time.Duration
	// KubeAPIQPS and KubeAPIBurst limit the API requests of each Kubernetes
	// client (client-go's token bucket).
	KubeAPIQPS   float32
	KubeAPIBurst int
}

// Flag names.
const (
	FlagConfigFile          = "config-file"
	FlagInitMaster          = "init-master"
	FlagInitNode            = "init-node"
	FlagInitClusterManager  = "init-cluster-manager"
	FlagInitZone            = "init-ovnkube-controller"
	FlagEgressIPEnable      = "egress-ip-enable"
	FlagGatewayMode         = "gateway-mode"
	FlagGatewayInterface    = "gateway-interface"
	FlagNBAddress           = "nb-address"
	FlagNBClientPrivKey     = "nb-client-privkey"
	FlagNBClientCert        = "nb-client-cert"
	FlagNBClientCACert      = "nb-client-cacert"
	FlagNBCertCommonName    = "nb-cert-common-name"
	FlagKubeconfig          = "kubeconfig"
	FlagClusterSubnets      = "cluster-subnets"
	FlagJoinSubnet          = "join-subnet"
	FlagHealthCheckPort     = "egressip-node-healthcheck-port"
	FlagReachabilityTimeout = "egressip-reachability-total-timeout"
	// DefaultReachabilityTimeout and DefaultReachabilityInterval are safe on real networks: a node whose links
	// are cut is declared unreachable after about interval + 2 x timeout (2.5 s); a dead daemon (its kernel refuses
	// the health port) within one interval.
	DefaultReachabilityTimeout  = time.Second
	DefaultReachabilityInterval = 500 * time.Millisecond
	FlagReachabilityPeriod      = "egressip-reachability-interval"
	FlagNodeResync              = "egressip-node-resync-interval"
	FlagNodeReleaseLinger       = "egressip-node-release-linger"
	FlagMetricsBindAddress      = "metrics-bind-address"
	FlagEnablePprof             = "enable-pprof"
	FlagPprofBindAddress        = "pprof-bind-address"
	FlagLogLevel                = "loglevel"
	FlagLeaderElection          = "leader-elect"
	FlagLeaderNamespace         = "leader-elect-namespace"
	FlagLeaderName              = "leader-elect-name"
	FlagLeaseDuration           = "leader-elect-lease-duration"
	FlagRenewDeadline           = "leader-elect-renew-deadline"
	FlagRetryPeriod             = "leader-elect-retry-period"
	FlagNBConnectTimeout        = "nb-connect-timeout"
	FlagKubeAPIQPS              = "kube-api-qps"
	FlagKubeAPIBurst            = "kube-api-burst"
)

// Flags returns the command-line flags of ovnkube.
func Flags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: FlagConfigFile, Usage: "INI config `FILE` (sections default, kubernetes, ovnnorth, gateway, logging, metrics, ovnkubernetesfeature); flags win"},
		&cli.StringFlag{Name: FlagInitMaster, Usage: "run the master (egress IP assignment, status and OVN Northbound rows) on node `NODE`; as upstream OVN-Kubernetes, the node name may follow, or be omitted"},
		&cli.StringFlag{Name: FlagInitNode, Usage: "run the node daemon for Node `NAME`"},
		&cli.StringFlag{Name: FlagInitClusterManager, Usage: "interconnect layout: run the cluster manager (egress IP assignment, health checks, status, Events; no OVN Northbound rows) on node `NODE`; the node name may be omitted"},
		&cli.StringFlag{Name: FlagInitZone, Usage: "interconnect layout: run the zone controller of node `NODE` (its zone's OVN Northbound rows at --nb-address, from the EgressIP status it reads)"},
		&cli.BoolFlag{Name: FlagEgressIPEnable, Aliases: []string{"enable-egress-ip"}, Usage: "enable the egress IP feature"},
		&cli.StringFlag{Name: FlagGatewayMode, Value: string(gwmode.Shared), Usage: "gateway `MODE`: shared or local"},
		&cli.StringFlag{Name: FlagGatewayInterface, Usage: "node gateway `INTERFACE` (default: the interface of the default route)"},
		&cli.StringFlag{Name: FlagNBAddress, Usage: "OVN Northbound database `ADDRESS`: tcp:HOST:PORT, ssl:HOST:PORT or unix:PATH; a comma list for a clustered NB (ssl: needs --" + FlagNBClientPrivKey + ", --" + FlagNBClientCert + " and --" + FlagNBClientCACert + ")"},
		&cli.StringFlag{Name: FlagNBClientPrivKey, Usage: "ssl: NB addresses: PEM `FILE` of the private key the client presents"},
		&cli.StringFlag{Name: FlagNBClientCert, Usage: "ssl: NB addresses: PEM `FILE` of the client certificate (signed by the CA the NB server trusts)"},
		&cli.StringFlag{Name: FlagNBClientCACert, Usage: "ssl: NB addresses: PEM `FILE` of the CA certificate(s) the NB server's certificate must chain to"},
		&cli.StringFlag{Name: FlagNBCertCommonName, Usage: "ssl: NB addresses: the `NAME` the NB server's certificate must carry (a DNS name of its subjectAltName, or its Common Name when it has no subjectAltName); default: the host of each address"},
		&cli.StringFlag{Name: FlagKubeconfig, Aliases: []string{"k8s-kubeconfig"}, Usage: "path of the kubeconfig `FILE` (default: in-cluster config)"},
		&cli.StringFlag{Name: FlagClusterSubnets, Value: "10.244.0.0/16", Usage: "comma list of cluster pod `SUBNETS` (CIDR, optionally CIDR/hostPrefix)"},
		&cli.StringFlag{Name: FlagJoinSubnet, Aliases: []string{"gateway-v4-join-subnet"}, Value: "100.64.0.0/16", Usage: "comma list of join switch `SUBNETS`"},
		&cli.IntFlag{Name: FlagHealthCheckPort, Value: 9107, Usage: "egress node gRPC health check port; 0 = legacy TCP check on port 9"},
		&cli.DurationFlag{Name: FlagReachabilityTimeout, Value: DefaultReachabilityTimeout, Usage: "total timeout of one egress node health probe (0 disables the check: every node is reachable); a node is unreachable after two probes in a row its kernel did not answer either (or that its health server refused), or after ten slow answers in a row; 75ms with an interval of 25ms fails a cut node over in about 175 ms where the master's path to the nodes is short and quiet (docs/egressip.md, \"Health check timings\")"},
		&cli.DurationFlag{Name: FlagReachabilityPeriod, Value: DefaultReachabilityInterval, Usage: "interval between egress node health probes"},
		&cli.DurationFlag{Name: FlagNodeResync, Value: 30 * time.Second, Usage: "how often the node re-applies its egress host state (repairs drift)"},
		&cli.DurationFlag{Name: FlagNodeReleaseLinger, Value: 5 * time.Second, Usage: "local gateway mode: how long the SNAT rules of an egress IP that moved to another node stay, and the rule of a pod on another node that an egress IP held here stops serving (traffic still rerouted here leaves with the egress IP); 0 = not at all"},
		&cli.StringFlag{Name: FlagMetricsBindAddress, Usage: "`HOST:PORT` to serve Prometheus /metrics, /healthz and /readyz on (default: off)"},
		&cli.BoolFlag{Name: FlagEnablePprof, Aliases: []string{"metrics-enable-pprof"}, Usage: "serve Go's /debug/pprof/ profiles, unauthenticated, on --" + FlagPprofBindAddress},
		&cli.StringFlag{Name: FlagPprofBindAddress, Value: DefaultPprofBindAddress, Usage: "with --" + FlagEnablePprof + ": `HOST:PORT` of the profiles (loopback by default: anyone who reaches it can read the process' memory)"},
		&cli.IntFlag{Name: FlagLogLevel, Value: 4, Usage: "klog verbosity"},
		&cli.BoolFlag{Name: FlagLeaderElection, Value: true, Usage: "master: hold a coordination.k8s.io Lease before acting"},
		&cli.StringFlag{Name: FlagLeaderNamespace, Value: "kube-system", Usage: "namespace of the master's Lease"},
		&cli.StringFlag{Name: FlagLeaderName, Value: "ovn-egressip-master", Usage: "name of the master's Lease"},
		&cli.DurationFlag{Name: FlagLeaseDuration, Value: 4 * time.Second, Usage: "leader election lease duration"},
		&cli.DurationFlag{Name: FlagRenewDeadline, Value: 3 * time.Second, Usage: "leader election renew deadline"},
		&cli.DurationFlag{Name: FlagRetryPeriod, Value: 500 * time.Millisecond, Usage: "leader election retry period"},
		&cli.DurationFlag{Name: FlagNBConnectTimeout, Value: 20 * time.Second, Usage: "how long to wait for the NB database at start-up"},
		&cli.Float64Flag{Name: FlagKubeAPIQPS, Value: 50, Usage: "API requests per second of each Kubernetes client, sustained (the master writes up to two status updates per EgressIP whose assignment changes)"},
		&cli.IntFlag{Name: FlagKubeAPIBurst, Value: 100, Usage: "API requests of each Kubernetes client in a burst above --" + FlagKubeAPIQPS},
	}
}

// file is the INI config file layout (section and key names as OVN-Kubernetes
// uses). Each key's `flag` tag names the flag it stands for (FileKeys, the flag
// reference docs/flags.md): these are the only keys read.
type file struct {
	Default struct {
		ClusterSubnets string `gcfg:"cluster-subnets" flag:"cluster-subnets"`
	}
	Kubernetes struct {
		Kubeconfig string `gcfg:"kubeconfig" flag:"kubeconfig"`
	}
	OvnNorth struct {
		Address        string `gcfg:"address" flag:"nb-address"`
		ClientPrivKey  string `gcfg:"client-privkey" flag:"nb-client-privkey"`
		ClientCert     string `gcfg:"client-cert" flag:"nb-client-cert"`
		ClientCACert   string `gcfg:"client-cacert" flag:"nb-client-cacert"`
		CertCommonName string `gcfg:"cert-common-name" flag:"nb-cert-common-name"`
	}
	Gateway struct {
		Mode         string `gcfg:"mode" flag:"gateway-mode"`
		Interface    string `gcfg:"interface" flag:"gateway-interface"`
		V4JoinSubnet string `gcfg:"v4-join-subnet" flag:"join-subnet"`
	}
	Logging struct {
		Loglevel *int `gcfg:"loglevel" flag:"loglevel"`
	}
	Metrics struct {
		BindAddress string `gcfg:"bind-address" flag:"metrics-bind-address"`
		EnablePprof bool   `gcfg:"enable-pprof" flag:"enable-pprof"`
	}
	OvnKubernetesFeature struct {
		EnableEgressIP                   *bool  `gcfg:"enable-egress-ip" flag:"egress-ip-enable"`
		EgressIPReachabilityTotalTimeout string `gcfg:"egressip-reachability-total-timeout" flag:"egressip-reachability-total-timeout"`
		EgressIPNodeHealthcheckPort      *int   `gcfg:"egressip-node-healthcheck-port" flag:"egressip-node-healthcheck-port"`
	}
}

// DefaultPprofBindAddress is where --enable-pprof serves unless told otherwise: loopback only.
const DefaultPprofBindAddress = "127.0.0.1:9413"

// FileKey is one key of the INI config file that is read.
type FileKey struct {
	Section, Key string
	// Flag is the flag the key stands for (the flag wins when both are set).
	Flag string
}

// FileKeys lists every INI key ovnkube reads, in file order: section by section.
func FileKeys() []FileKey {
	var out []FileKey
	ft := reflect.TypeOf(file{})
	for i := 0; i < ft.NumField(); i++ {
		sec := ft.Field(i)
		for j := 0; j < sec.Type.NumField(); j++ {
			k := sec.Type.Field(j)
			out = append(out, FileKey{Section: strings.ToLower(sec.Name), Key: k.Tag.Get("gcfg"), Flag: k.Tag.Get("flag")})
		}
	}
	return out
}

// Load builds the Config from the flags of c and, when --config-file is set, the
// INI file. Errors are one line naming the flag (or file key) and the value.
func Load(c *cli.Context) (*Config, error) { return loadConfig(c, true) }

// LoadClient is Load for read-only tools (ovnkube egressip explain): the same
// flags and file, no role required.
func LoadClient(c *cli.Context) (*Config, error) { return loadConfig(c, false) }

// ClientFlags are the flags of read-only tools: where the API and NB are, and the
// cluster's gateway mode and subnets (as the daemons take them).
func ClientFlags() []cli.Flag {
	keep := map[string]bool{FlagConfigFile: true, FlagGatewayMode: true, FlagNBAddress: true, FlagKubeconfig: true,
		FlagClusterSubnets: true, FlagJoinSubnet: true, FlagLogLevel: true,
		FlagNBClientPrivKey: true, FlagNBClientCert: true, FlagNBClientCACert: true, FlagNBCertCommonName: true}
	var out []cli.Flag
	for _, f := range Flags() {
		if keep[f.Names()[0]] {
			out = append(out, f)
		}
	}
	return out
}

// readConfigFile reads --config-file (none: an empty file).
func readConfigFile(c *cli.Context) (file, error) {
	var f file
	if path := c.String(FlagConfigFile); path != "" {
		if _, err := os.Stat(path); err != nil {
			return f, fmt.Errorf("invalid --%s %q: %w", FlagConfigFile, path, err)
		}
		if err := gcfg.FatalOnly(gcfg.ReadFileInto(&f, path)); err != nil {
			return f, fmt.Errorf("invalid --%s %q: %w", FlagConfigFile, path, err)
		}
	}
	return f, nil
}

func loadConfig(c *cli.Context, role bool) (*Config, error) {
	f, err := readConfigFile(c)
	if err != nil {
		return nil, err
	}
	// str returns the flag when set on the command line, else the file value when
	// non-empty, else the flag's default.
	str := func(flag, fromFile string) string {
		if c.IsSet(flag) || fromFile == "" {
			return c.String(flag)
		}
		return fromFile
	}
	cfg := &Config{
		InitMaster:                  role && c.IsSet(FlagInitMaster) && c.String(FlagInitMaster) != "false",
		InitNode:                    c.String(FlagInitNode),
		InitClusterManager:          role && c.IsSet(FlagInitClusterManager) && c.String(FlagInitClusterManager) != "false",
		InitZone:                    c.String(FlagInitZone),
		EgressIPEnable:              c.Bool(FlagEgressIPEnable),
		GatewayInterface:            str(FlagGatewayInterface, f.Gateway.Interface),
		Kubeconfig:                  str(FlagKubeconfig, f.Kubernetes.Kubeconfig),
		HealthCheckPort:             c.Int(FlagHealthCheckPort),
		ReachabilityTotalTimeout:    c.Duration(FlagReachabilityTimeout),
		ReachabilityInterval:        c.Duration(FlagReachabilityPeriod),
		NodeResyncInterval:          c.Duration(FlagNodeResync),
		NodeReleaseLinger:           c.Duration(FlagNodeReleaseLinger),
		MetricsBindAddress:          str(FlagMetricsBindAddress, f.Metrics.BindAddress),
		EnablePprof:                 c.Bool(FlagEnablePprof) || f.Metrics.EnablePprof,
		PprofBindAddress:            c.String(FlagPprofBindAddress),
		NBClientPrivKey:             str(FlagNBClientPrivKey, f.OvnNorth.ClientPrivKey),
		NBClientCert:                str(FlagNBClientCert, f.OvnNorth.ClientCert),
		NBClientCACert:              str(FlagNBClientCACert, f.OvnNorth.ClientCACert),
		NBCertCommonName:            str(FlagNBCertCommonName, f.OvnNorth.CertCommonName),
		LogLevel:                    c.Int(FlagLogLevel),
		LeaderElection:              c.Bool(FlagLeaderElection),
		LeaderElectionNamespace:     c.String(FlagLeaderNamespace),
		LeaderElectionName:          c.String(FlagLeaderName),
		LeaderElectionLeaseDuration: c.Duration(FlagLeaseDuration),
		LeaderElectionRenewDeadline: c.Duration(FlagRenewDeadline),
		LeaderElectionRetryPeriod:   c.Duration(FlagRetryPeriod),
		NBConnectTimeout:            c.Duration(FlagNBConnectTimeout),
		KubeAPIQPS:                  float32(c.Float64(FlagKubeAPIQPS)),
		KubeAPIBurst:                c.Int(FlagKubeAPIBurst),
	}
	if err := checkAPILimits(c.Float64(FlagKubeAPIQPS), cfg.KubeAPIBurst); err != nil {
		return nil, err
	}
	if v := c.String(FlagInitMaster); cfg.InitMaster && v != "true" {
		cfg.MasterNode = v
	}
	if v := c.String(FlagInitClusterManager); cfg.InitClusterManager && v != "true" {
		cfg.ClusterManagerNode = v
	}
	if err := applyFile(c, &f, cfg); err != nil {
		return nil, err
	}

	if cfg.GatewayMode, err = gwmode.Parse(str(FlagGatewayMode, f.Gateway.Mode)); err != nil {
		return nil, fmt.Errorf("invalid --%s: %w", FlagGatewayMode, err)
	}
	if cfg.ClusterSubnets, err = parseCIDRList(FlagClusterSubnets, str(FlagClusterSubnets, f.Default.ClusterSubnets), true); err != nil {
		return nil, err
	}
	if cfg.JoinSubnets, err = parseCIDRList(FlagJoinSubnet, str(FlagJoinSubnet, f.Gateway.V4JoinSubnet), false); err != nil {
		return nil, err
	}
	if err := cfg.setNB(str(FlagNBAddress, f.OvnNorth.Address)); err != nil {
		return nil, err
	}
	if !role {
		return cfg, checkKubeconfig(cfg)
	}
	if err := checkRole(cfg); err != nil {
		return nil, err
	}
	if err := checkKubeconfig(cfg); err != nil {
		return nil, err
	}
	return cfg, nil
}

// checkAPILimits checks --kube-api-qps and --kube-api-burst.
func checkAPILimits(qps float64, burst int) error {
	if qps <= 0 || qps > 1e6 {
		return fmt.Errorf("invalid --%s %v: must be above 0", FlagKubeAPIQPS, qps)
	}
	if burst < 1 {
		return fmt.Errorf("invalid --%s %d: must be at least 1", FlagKubeAPIBurst, burst)
	}
	return nil
}

// setNB parses the NB address list nb (empty: none) and the TLS settings it needs.
func (cfg *Config) setNB(nb string) error {
	var err error
	if nb != "" {
		if cfg.NBAddresses, err = parseNBAddresses(nb); err != nil {
			return err
		}
	}
	cfg.NBTLS, err = cfg.NBTLSFor(cfg.NBAddresses)
	return err
}

// checkRole checks the settings of a process that runs a role (master, cluster manager, zone controller, node).
func checkRole(cfg *Config) error {
	if cfg.HealthCheckPort < 0 || cfg.HealthCheckPort > 65535 {
		return fmt.Errorf("invalid --%s %d: must be 0..65535", FlagHealthCheckPort, cfg.HealthCheckPort)
	}
	if cfg.ReachabilityTotalTimeout < 0 {
		return fmt.Errorf("invalid --%s %s: must not be negative", FlagReachabilityTimeout, cfg.ReachabilityTotalTimeout)
	}
	if cfg.ReachabilityInterval <= 0 {
		return fmt.Errorf("invalid --%s %s: must be positive", FlagReachabilityPeriod, cfg.ReachabilityInterval)
	}
	if cfg.NodeReleaseLinger < 0 {
		return fmt.Errorf("invalid --%s %s: must not be negative", FlagNodeReleaseLinger, cfg.NodeReleaseLinger)
	}
	if cfg.NodeResyncInterval <= 0 {
		return fmt.Errorf("invalid --%s %s: must be positive", FlagNodeResync, cfg.NodeResyncInterval)
	}
	if cfg.EnablePprof {
		if _, _, err := net.SplitHostPort(cfg.PprofBindAddress); err != nil {
			return fmt.Errorf("invalid --%s %q: %w", FlagPprofBindAddress, cfg.PprofBindAddress, err)
		}
	}
	if !cfg.InitMaster && cfg.InitNode == "" && !cfg.InitClusterManager && cfg.InitZone == "" {
		return fmt.Errorf("nothing to do: set --%s, --%s, --%s NODE and/or --%s NODE", FlagInitMaster, FlagInitClusterManager, FlagInitZone, FlagInitNode)
	}
	if cfg.InitMaster && (cfg.InitClusterManager || cfg.InitZone != "") {
		return fmt.Errorf("--%s is the centralized layout: it does not go with --%s or --%s (the interconnect layout)", FlagInitMaster, FlagInitClusterManager, FlagInitZone)
	}
	if (cfg.InitMaster || cfg.InitZone != "") && len(cfg.NBAddresses) == 0 && cfg.EgressIPEnable {
		return fmt.Errorf("missing --%s: the master and the zone controller need the OVN Northbound database (the zone's own, for --%s)", FlagNBAddress, FlagInitZone)
	}
	if cfg.InitZone != "" && cfg.InitNode != "" && cfg.InitZone != cfg.InitNode {
		return fmt.Errorf("--%s %s and --%s %s: a zone controller runs beside the node daemon of its own node", FlagInitZone, cfg.InitZone, FlagInitNode, cfg.InitNode)
	}
	return nil
}

// applyFile applies the values of the config file f that the command line does not set.
func applyFile(c *cli.Context, f *file, cfg *Config) error {
	if !c.IsSet(FlagEgressIPEnable) && f.OvnKubernetesFeature.EnableEgressIP != nil {
		cfg.EgressIPEnable = *f.OvnKubernetesFeature.EnableEgressIP
	}
	if !c.IsSet(FlagHealthCheckPort) && f.OvnKubernetesFeature.EgressIPNodeHealthcheckPort != nil {
		cfg.HealthCheckPort = *f.OvnKubernetesFeature.EgressIPNodeHealthcheckPort
	}
	if !c.IsSet(FlagLogLevel) && f.Logging.Loglevel != nil {
		cfg.LogLevel = *f.Logging.Loglevel
	}
	if !c.IsSet(FlagReachabilityTimeout) && f.OvnKubernetesFeature.EgressIPReachabilityTotalTimeout != "" {
		d, err := parseSecondsOrDuration(f.OvnKubernetesFeature.EgressIPReachabilityTotalTimeout)
		if err != nil {
			return fmt.Errorf("invalid [ovnkubernetesfeature] egressip-reachability-total-timeout %q in %s: %w",
				f.OvnKubernetesFeature.EgressIPReachabilityTotalTimeout, c.String(FlagConfigFile), err)
		}
		cfg.ReachabilityTotalTimeout = d
	}
	return nil
}

func checkKubeconfig(cfg *Config) error {
	if cfg.Kubeconfig != "" {
		if _, err := os.Stat(cfg.Kubeconfig); err != nil {
			return fmt.Errorf("invalid --%s %q: %w", FlagKubeconfig, cfg.Kubeconfig, err)
		}
	} else if os.Getenv("KUBERNETES_SERVICE_HOST") == "" {
		return fmt.Errorf("missing --%s: not running in a cluster (KUBERNETES_SERVICE_HOST unset)", FlagKubeconfig)
	}
	return nil
}

func parseSecondsOrDuration(s string) (time.Duration, error) {
	if d, err := time.ParseDuration(s); err == nil {
		return d, nil
	}
	var secs int
	if _, err := fmt.Sscanf(s, "%d", &secs); err != nil || fmt.Sprint(secs) != s {
		return 0, fmt.Errorf("want seconds (e.g. 1) or a duration (e.g. 300ms)")
	}
	return time.Duration(secs) * time.Second, nil
}

func parseCIDRList(flag, value string, allowHostPrefix bool) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, item := range strings.Split(value, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		cidr := item
		if allowHostPrefix && strings.Count(item, "/") == 2 {
			cidr = item[:strings.LastIndex(item, "/")]
		}
		p, err := netip.ParsePrefix(cidr)
		if err != nil {
			return nil, fmt.Errorf("invalid --%s %q: %q is not a CIDR", flag, value, item)
		}
		if p != p.Masked() {
			return nil, fmt.Errorf("invalid --%s %q: %q has host bits set (did you mean %s?)", flag, value, item, p.Masked())
		}
		out = append(out, p)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("invalid --%s %q: no CIDR given", flag, value)
	}
	return out, nil
}

func parseNBAddresses(value string) ([]string, error) {
	addrs, err := ovsdbaddr.ParseList(value)
	if err != nil {
		return nil, fmt.Errorf("invalid --%s %q: %w", FlagNBAddress, value, err)
	}
	return addrs, nil
}

// NormalizeArgs makes both forms of --init-master parse: upstream OVN-Kubernetes'
// "--init-master NODE" and this project's "--init-master" with no value (followed
// by another flag, or last), which becomes "--init-master=true". Arguments after
// "--" are left alone.
func NormalizeArgs(args []string) []string {
	out := append([]string(nil), args...)
	for i := 1; i < len(out); i++ {
		a := out[i]
		if a == "--" {
			break
		}
		flag := ""
		for _, f := range []string{FlagInitMaster, FlagInitClusterManager} {
			if a == "--"+f || a == "-"+f {
				flag = f
			}
		}
		if flag == "" {
			continue
		}
		if i+1 == len(out) || strings.HasPrefix(out[i+1], "-") {
			out[i] = "--" + flag + "=true"
		} else {
			i++ // the node name
		}
	}
	return out
}
