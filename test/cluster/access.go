package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/ovn-egressip/ovn-egressip/test/apiserver"
)

// The identities ovnkube runs as on the local cluster: the ServiceAccounts of dist/manifests/ovnkube-egressip.yaml.
const (
	// AccessNamespace is the namespace of the ServiceAccounts (and of the master's Lease: pass it to
	// ovnkube --leader-elect-namespace).
	AccessNamespace  = "ovn-egressip"
	masterAccount    = "ovnkube-egressip-master"
	nodeAccount      = "ovnkube-egressip-node"
	nodeWritesPolicy = "ovnkube-egressip-node-writes"
	// TokenTTL is the lifetime of the tokens the harness issues; the agent replaces each one when 80% of it has
	// passed, as the kubelet does, and client-go re-reads the token file of the kubeconfig.
	TokenTTL = time.Hour
)

// accessKinds are the kinds of dist/manifests/ovnkube-egressip.yaml the harness applies: who may do what. The
// workloads (Deployment, DaemonSet, ConfigMap) are not applied: ovnkube runs as processes here.
var accessKinds = map[string]bool{
	"Namespace": true, "ServiceAccount": true, "ClusterRole": true, "ClusterRoleBinding": true, "Role": true,
	"RoleBinding": true, "ValidatingAdmissionPolicy": true, "ValidatingAdmissionPolicyBinding": true,
}

var kindLine = regexp.MustCompile(`(?m)^kind:\s*(\S+)\s*$`)

// accessManifest returns the documents of manifest whose kind is in accessKinds, as one YAML stream.
func accessManifest(manifest string) (string, error) {
	var keep []string
	for _, doc := range strings.Split(manifest, "\n---\n") {
		m := kindLine.FindStringSubmatch(doc)
		if m == nil {
			continue
		}
		if accessKinds[m[1]] {
			keep = append(keep, doc)
		}
	}
	if len(keep) == 0 {
		return "", fmt.Errorf("no ServiceAccount, role or admission policy in the manifest")
	}
	return strings.Join(keep, "\n---\n") + "\n", nil
}

func (p paths) access() string { return filepath.Join(p.dir, "access") }
func (p paths) accessKubeconfig(who string) string {
	return filepath.Join(p.access(), "kubeconfig-"+who)
}
func (p paths) accessToken(who string) string { return filepath.Join(p.access(), "token-"+who) }

// hasAccess reports whether the cluster in p has ovnkube's kubeconfigs (installAccess ran).
func hasAccess(p paths) bool {
	_, err := os.Stat(p.accessKubeconfig("master"))
	return err == nil
}

// installAccess applies the ServiceAccounts, roles and the node-writes admission policy of
// dist/manifests/ovnkube-egressip.yaml, issues the tokens (the master's, and one per node bound to its Node) and
// writes a kubeconfig per identity that reads its token from the token file. It returns once the apiserver enforces
// the policy.
func installAccess(ctx context.Context, p paths, kubectl, root, server string, cs kubernetes.Interface, nodes []NodeAddrs) error {
	manifest := filepath.Join(root, "dist", "manifests", "ovnkube-egressip.yaml")
	data, err := os.ReadFile(manifest)
	if err != nil {
		return err
	}
	docs, err := accessManifest(string(data))
	if err != nil {
		return fmt.Errorf("%s: %w", manifest, err)
	}
	cmd := exec.CommandContext(ctx, kubectl, "--kubeconfig", p.kubeconfig(), "apply", "-f", "-")
	cmd.Stdin = strings.NewReader(docs)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("kubectl apply (access part of %s): %w: %s", manifest, err, strings.TrimSpace(string(out)))
	}
	if err := os.MkdirAll(p.access(), 0o700); err != nil {
		return err
	}
	names := make([]string, len(nodes))
	for i, n := range nodes {
		names[i] = n.Name
	}
	if err := RefreshTokens(ctx, cs, p.dir, names); err != nil {
		return err
	}
	ca, err := os.ReadFile(filepath.Join(p.pki(), "ca.crt"))
	if err != nil {
		return err
	}
	for _, who := range append([]string{"master"}, names...) {
		cfg := clientcmdapi.NewConfig()
		cfg.Clusters["local"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca}
		cfg.AuthInfos[who] = &clientcmdapi.AuthInfo{TokenFile: p.accessToken(who)}
		cfg.Contexts[who] = &clientcmdapi.Context{Cluster: "local", AuthInfo: who}
		cfg.CurrentContext = who
		if err := clientcmd.WriteToFile(*cfg, p.accessKubeconfig(who)); err != nil {
			return err
		}
	}
	return waitPolicyEnforced(ctx, p, names[0])
}

// waitPolicyEnforced waits until the apiserver applies the node-writes policy (it loads policies asynchronously): a
// dry-run label of node by its own daemon's token must be denied by it.
func waitPolicyEnforced(ctx context.Context, p paths, node string) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", p.accessKubeconfig(node))
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	patch := []byte(`{"metadata":{"labels":{"k8s.ovn.org/egress-assignable":""}}}`)
	var last error
	err = poll(ctx, 50*time.Millisecond, func() (bool, error) {
		_, last = cs.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		return last != nil && strings.Contains(last.Error(), nodeWritesPolicy), nil
	})
	if err != nil {
		//nolint:errorlint // last is nil when the apiserver allowed the patch: %v prints <nil>, the cause is err
		return fmt.Errorf("admission policy %s not enforced (last answer to %s labelling itself: %v): %w", nodeWritesPolicy, node, last, err)
	}
	return nil
}

// RefreshTokens issues new tokens for ovnkube on the cluster in stateDir, as the admin cs: the master's, and for each
// of nodes one of the node daemon's ServiceAccount bound to that Node (as a kubelet's are). Each is written to its
// token file atomically; the kubeconfigs of Cluster.MasterKubeconfig and Cluster.NodeKubeconfig read them.
func RefreshTokens(ctx context.Context, cs kubernetes.Interface, stateDir string, nodes []string) error {
	p := paths{dir: stateDir}
	write := func(who, token string) error {
		tmp := p.accessToken(who) + ".tmp"
		if err := os.WriteFile(tmp, []byte(token), 0o600); err != nil {
			return err
		}
		return os.Rename(tmp, p.accessToken(who))
	}
	tok, err := apiserver.ServiceAccountToken(ctx, cs, AccessNamespace, masterAccount, "", TokenTTL)
	if err != nil {
		return err
	}
	if err := write("master", tok); err != nil {
		return err
	}
	for _, n := range nodes {
		tok, err := apiserver.ServiceAccountToken(ctx, cs, AccessNamespace, nodeAccount, n, TokenTTL)
		if err != nil {
			return err
		}
		if err := write(n, tok); err != nil {
			return err
		}
	}
	return nil
}

// MasterKubeconfig is the kubeconfig of the master's ServiceAccount (ovnkube-egressip-master, the ClusterRole and
// Lease Role of dist/manifests; run the master with --leader-elect-namespace AccessNamespace).
func (c *Cluster) MasterKubeconfig() string { return c.p.accessKubeconfig("master") }

// NodeKubeconfig is the kubeconfig of node's daemon: the node daemon's ServiceAccount with a token bound to node's
// Node object, so that the admission policy lets it change that Node's egress annotations and nothing else.
func (c *Cluster) NodeKubeconfig(node string) (string, error) {
	for _, n := range c.nodes {
		if n.Name == node {
			return c.p.accessKubeconfig(node), nil
		}
	}
	return "", fmt.Errorf("no node %q in this cluster", node)
}

// RunTokenRefresher replaces the tokens of the cluster in stateDir (RefreshTokens, for every node of the cluster)
// each time 80% of TokenTTL has passed, as the kubelet does, until ctx ends. kubeconfig is the admin's. Failures are
// reported through logf and retried every 10 s.
func RunTokenRefresher(ctx context.Context, kubeconfig, stateDir string, logf func(string, ...any)) error {
	cs, err := newClient(kubeconfig)
	if err != nil {
		return err
	}
	wait := TokenTTL * 8 / 10
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		// The cluster's state is read now: the agent starts before cluster.json is written.
		err := func() error {
			c, err := Open(stateDir)
			if err != nil {
				return err
			}
			c.Close()
			names := make([]string, 0, len(c.nodes))
			for _, n := range c.nodes {
				names = append(names, n.Name)
			}
			return RefreshTokens(ctx, cs, c.p.dir, names)
		}()
		if err != nil {
			logf("refresh ovnkube tokens: %v", err)
			wait = 10 * time.Second
			continue
		}
		wait = TokenTTL * 8 / 10
	}
}
