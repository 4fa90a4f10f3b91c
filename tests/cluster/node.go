package main

// `vigil-cluster up --node CONTAINERD_DIR DIR`: the control plane and one real
// node beside it on this machine: containerd (its binaries in CONTAINERD_DIR,
// built by tests/node/build.sh) with Debian's runc and CNI plugins, the
// kubelet, kube-proxy and kube-scheduler, and a registry (Debian's
// docker-registry) for the node's images and policies. The node has an
// address of its own, on an interface of its own that leads nowhere else,
// that pods reach through the bridge: the API server serves there and the
// `kubernetes` Service leads to it through kube-proxy, as on a real node, and
// the registry serves there too, for containerd and for the agent's pulls. One node per machine: its runtime state and
// sockets live in /run/vigil-node.

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/trace/noop"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
	cri "k8s.io/cri-client/pkg"
)

const (
	nodeName = "vigil-node"
	// The node's address, on the interface nodeLink.
	nodeIP   = "10.254.0.1"
	nodeLink = "vigil-node"
	// The pods' addresses, on the bridge podBridge.
	podSubnet  = "10.88.0.0/16"
	podBridge  = "vigil-cni0"
	nodeRun    = "/run/vigil-node"
	cniPlugins = "/usr/lib/cni"
)

// node is what the node mode needs beyond the control plane.
type node struct {
	containerd string
	registry   int
	lock       *os.File
}

func (n *node) criEndpoint() string {
	return "unix://" + filepath.Join(nodeRun, "containerd.sock")
}

// prepareNode takes the machine's node lock and sets up the node's address,
// before the API server binds it.
func (c *cluster) prepareNode() error {
	if err := os.MkdirAll(nodeRun, 0o700); err != nil {
		return err
	}
	lock, err := os.OpenFile(nodeRun+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return err
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lock.Close()
		return fmt.Errorf("another vigil-cluster node runs on this machine (%s.lock is held)", nodeRun)
	}
	c.node.lock = lock
	if _, err := exec.LookPath("runc"); err != nil {
		return fmt.Errorf("runc is not on the PATH (Debian's package runc)")
	}
	if _, err := os.Stat(filepath.Join(cniPlugins, "bridge")); err != nil {
		return fmt.Errorf("no CNI bridge plugin in %s (Debian's package containernetworking-plugins)", cniPlugins)
	}
	// An empty bridge holds the address (this kernel has no dummy
	// interfaces); a leftover one of a node that did not stop is reused.
	_ = run("ip", "link", "add", nodeLink, "type", "bridge")
	for _, args := range [][]string{
		{"addr", "replace", nodeIP + "/32", "dev", nodeLink},
		{"link", "set", nodeLink, "up"},
	} {
		if err := run("ip", args...); err != nil {
			return err
		}
	}
	// Pods' traffic is routed through the host, Services' through iptables.
	for path, value := range map[string]string{
		"/proc/sys/net/ipv4/ip_forward":                "1",
		"/proc/sys/net/bridge/bridge-nf-call-iptables": "1",
	} {
		if err := os.WriteFile(path, []byte(value), 0o644); err != nil {
			return fmt.Errorf("sysctl %s: %w", path, err)
		}
	}
	c.node.registry, err = freePort()
	return err
}

func (c *cluster) writeNodePKI(ca *authority) error {
	pki := c.path("pki")
	clients := []struct{ name, user, group string }{
		{"kubelet", "system:node:" + nodeName, "system:nodes"},
		{"scheduler", "system:kube-scheduler", ""},
		{"kube-proxy", "system:kube-proxy", ""},
		// The API server's own identity when it asks a kubelet for logs.
		{"apiserver-kubelet-client", "kube-apiserver-kubelet-client", "system:masters"},
	}
	for _, client := range clients {
		var groups []string
		if client.group != "" {
			groups = []string{client.group}
		}
		if err := ca.issue(pki, client.name, client.user, groups, nil); err != nil {
			return err
		}
	}
	for _, user := range []string{"kubelet", "scheduler", "kube-proxy"} {
		if err := c.writeKubeconfig(user); err != nil {
			return err
		}
	}
	return nil
}

// startNode starts the registry, containerd, the scheduler, the kubelet and
// kube-proxy, and waits until the node is Ready.
func (c *cluster) startNode() error {
	if err := c.startRegistry(); err != nil {
		return err
	}
	if err := c.startContainerd(); err != nil {
		return err
	}
	if err := c.start("kube-scheduler", []string{
		"--kubeconfig=" + c.path("scheduler.conf"),
		"--authentication-kubeconfig=" + c.path("scheduler.conf"),
		"--authorization-kubeconfig=" + c.path("scheduler.conf"),
		"--leader-elect=false", "--secure-port=0", "--v=1",
	}); err != nil {
		return err
	}
	if err := c.startKubelet(); err != nil {
		return err
	}
	if err := c.startKubeProxy(); err != nil {
		return err
	}
	return c.waitNodeReady(3 * time.Minute)
}

// registry is the registry's address: the node's, reached from this
// machine and its pods only.
func (c *cluster) registry() string {
	return net.JoinHostPort(nodeIP, fmt.Sprint(c.node.registry))
}

func (c *cluster) startRegistry() error {
	config := fmt.Sprintf("version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: %s\n  delete:\n    enabled: true\nhttp:\n  addr: %s\n",
		c.path("registry"), c.registry())
	if err := os.WriteFile(c.path("registry.yml"), []byte(config), 0o600); err != nil {
		return err
	}
	if err := c.startBinary("registry", "docker-registry", nil, "serve", c.path("registry.yml")); err != nil {
		return err
	}
	return c.waitDial("registry", "tcp", c.registry())
}

func (c *cluster) startContainerd() error {
	dir := c.path("containerd")
	hosts := filepath.Join(dir, "certs.d", c.registry())
	if err := os.MkdirAll(hosts, 0o700); err != nil {
		return err
	}
	// The node's registry speaks plain HTTP.
	hostsToml := fmt.Sprintf("server = \"http://%[1]s\"\n[host.\"http://%[1]s\"]\n  capabilities = [\"pull\", \"resolve\"]\n", c.registry())
	if err := os.WriteFile(filepath.Join(hosts, "hosts.toml"), []byte(hostsToml), 0o600); err != nil {
		return err
	}
	if err := c.writeCNI(); err != nil {
		return err
	}
	config := fmt.Sprintf(containerdConfig, filepath.Join(dir, "root"), filepath.Join(nodeRun, "containerd"),
		filepath.Join(nodeRun, "containerd.sock"), c.registry(), filepath.Join(dir, "certs.d"),
		cniPlugins, c.path("cni", "net.d"))
	if err := os.WriteFile(filepath.Join(dir, "config.toml"), []byte(config), 0o600); err != nil {
		return err
	}
	// containerd finds its shim on the PATH.
	env := []string{"PATH=" + c.node.containerd + ":" + os.Getenv("PATH")}
	if err := c.startBinary("containerd", filepath.Join(c.node.containerd, "containerd"), env,
		"--config", filepath.Join(dir, "config.toml")); err != nil {
		return err
	}
	return c.waitDial("containerd", "unix", filepath.Join(nodeRun, "containerd.sock"))
}

// containerd's configuration: cgroupfs (the kubelet's driver here), Debian's
// runc, the pause image from the node's registry. This machine's sandbox
// withholds CAP_SYS_RESOURCE, so no container may lower its OOM score below
// containerd's own (restrict_oom_score_adj): the kubelet's scores for
// Guaranteed and Burstable pods are raised to containerd's.
const containerdConfig = `version = 3
root = %q
state = %q
[grpc]
  address = %q
[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
[plugins."io.containerd.cri.v1.images".pinned_images]
  sandbox = "%s/pause:1"
[plugins."io.containerd.cri.v1.images".registry]
  config_path = %q
[plugins."io.containerd.cri.v1.runtime"]
  restrict_oom_score_adj = true
[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
  SystemdCgroup = false
  BinaryName = "runc"
[plugins."io.containerd.cri.v1.runtime".cni]
  bin_dirs = [%q]
  conf_dir = %q
`

func (c *cluster) writeCNI() error {
	conf := c.path("cni", "net.d")
	if err := os.MkdirAll(conf, 0o700); err != nil {
		return err
	}
	network := map[string]any{
		"cniVersion": "0.4.0",
		"name":       "vigil-node",
		"plugins": []any{
			map[string]any{
				"type": "bridge", "bridge": podBridge, "isGateway": true, "ipMasq": true, "hairpinMode": true,
				"ipam": map[string]any{
					"type":    "host-local",
					"ranges":  [][]map[string]string{{{"subnet": podSubnet}}},
					"routes":  []map[string]string{{"dst": "0.0.0.0/0"}},
					"dataDir": c.path("cni", "ipam"),
				},
			},
			map[string]any{"type": "portmap", "capabilities": map[string]bool{"portMappings": true}},
		},
	}
	text, err := json.MarshalIndent(network, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(conf, "10-vigil-node.conflist"), text, 0o600)
}

// The kubelet's configuration; its eviction thresholds are set explicitly
// (drop-ins in DIR/kubelet/config.d change them, read at `restart kubelet`).
const kubeletConfig = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: %s
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: %s}
authorization: {mode: Webhook}
evictionHard: {memory.available: "100Mi", nodefs.available: "1%%", imagefs.available: "1%%"}
evictionPressureTransitionPeriod: 30s
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
resolvConf: /etc/resolv.conf
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
address: %s
serializeImagePulls: false
`

func (c *cluster) startKubelet() error {
	dir := c.path("kubelet")
	if err := os.MkdirAll(filepath.Join(dir, "config.d"), 0o700); err != nil {
		return err
	}
	config := fmt.Sprintf(kubeletConfig, c.node.criEndpoint(), c.path("pki", "ca.crt"), nodeIP)
	if err := os.WriteFile(filepath.Join(dir, "config.yaml"), []byte(config), 0o600); err != nil {
		return err
	}
	return c.start("kubelet", []string{
		"--config=" + filepath.Join(dir, "config.yaml"),
		"--config-dir=" + filepath.Join(dir, "config.d"),
		"--kubeconfig=" + c.path("kubelet.conf"),
		"--root-dir=" + filepath.Join(dir, "root"),
		"--cert-dir=" + filepath.Join(dir, "pki"),
		"--hostname-override=" + nodeName,
		"--node-ip=" + nodeIP,
		"--v=1",
	})
}

const kubeProxyConfig = `apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clusterCIDR: %s
hostnameOverride: %s
clientConnection: {kubeconfig: %s}
conntrack: {maxPerCore: 0, min: 0}
metricsBindAddress: 127.0.0.1:10249
healthzBindAddress: 127.0.0.1:10256
`

func (c *cluster) startKubeProxy() error {
	config := fmt.Sprintf(kubeProxyConfig, podSubnet, nodeName, c.path("kube-proxy.conf"))
	if err := os.WriteFile(c.path("kube-proxy.yaml"), []byte(config), 0o600); err != nil {
		return err
	}
	return c.start("kube-proxy", []string{"--config=" + c.path("kube-proxy.yaml"), "--v=1"})
}

// waitNodeReady waits until the node has registered and says it is Ready.
func (c *cluster) waitNodeReady(within time.Duration) error {
	client, err := c.adminClient()
	if err != nil {
		return err
	}
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if err := c.exited(); err != nil {
			return err
		}
		response, err := client.Get(c.server() + "/api/v1/nodes/" + nodeName)
		if err == nil {
			var found struct {
				Status struct {
					Conditions []struct{ Type, Status string }
				}
			}
			_ = json.NewDecoder(response.Body).Decode(&found)
			response.Body.Close()
			for _, condition := range found.Status.Conditions {
				if condition.Type == "Ready" && condition.Status == "True" {
					return nil
				}
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	return fmt.Errorf("node %s not Ready within %s; see %s", nodeName, within, c.path("kubelet.log"))
}

// stopNode removes every pod sandbox through the CRI (their containers, their
// network namespaces), stops the node's components, unmounts what the kubelet
// left mounted and removes the node's interfaces and Service rules, so that
// the machine is as before.
func (c *cluster) stopNode() {
	if c.node.lock == nil {
		// Another node's: not ours to clean.
		return
	}
	for _, name := range []string{"kube-proxy", "kubelet", "kube-scheduler"} {
		c.stopOne(name)
	}
	if _, started := c.children["containerd"]; started {
		if err := removeSandboxes(c.node.criEndpoint()); err != nil {
			fmt.Fprintf(os.Stderr, "vigil-cluster: removing the node's pods: %v\n", err)
		}
	}
	c.stopOne("containerd")
	c.stopOne("registry")
	unmountUnder(c.dir)
	unmountUnder(nodeRun)
	if err := exec.Command(c.self, "kube-proxy", "--cleanup").Run(); err != nil {
		fmt.Fprintf(os.Stderr, "vigil-cluster: kube-proxy --cleanup: %v\n", err)
	}
	removeKubeletChains()
	_ = run("ip", "link", "del", podBridge)
	_ = run("ip", "link", "del", nodeLink)
	_ = os.RemoveAll(nodeRun)
	if c.node.lock != nil {
		c.node.lock.Close()
	}
}

// removeKubeletChains removes the iptables chains the kubelet makes (kube-proxy
// --cleanup removes its own): a firewall rule for the loopback network and
// the canaries it watches for a flush of the tables.
func removeKubeletChains() {
	for _, iptables := range []string{"iptables", "ip6tables"} {
		for _, table := range []string{"filter", "nat", "mangle"} {
			for _, builtin := range []string{"INPUT", "OUTPUT"} {
				_ = run(iptables, "-t", table, "-D", builtin, "-j", "KUBE-FIREWALL")
			}
			for _, chain := range []string{"KUBE-FIREWALL", "KUBE-KUBELET-CANARY", "KUBE-IPTABLES-HINT"} {
				if run(iptables, "-t", table, "-F", chain) == nil {
					_ = run(iptables, "-t", table, "-X", chain)
				}
			}
		}
	}
}

func removeSandboxes(endpoint string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	service, err := cri.NewRemoteRuntimeService(ctx, endpoint, 10*time.Second, noop.NewTracerProvider(), false)
	if err != nil {
		return err
	}
	sandboxes, err := service.ListPodSandbox(ctx, &runtime.PodSandboxFilter{})
	if err != nil {
		return err
	}
	for _, sandbox := range sandboxes {
		if err := service.StopPodSandbox(ctx, sandbox.Id); err != nil {
			return fmt.Errorf("stop %s: %w", sandbox.Metadata.Name, err)
		}
		if err := service.RemovePodSandbox(ctx, sandbox.Id); err != nil {
			return fmt.Errorf("remove %s: %w", sandbox.Metadata.Name, err)
		}
	}
	return nil
}

// unmountUnder unmounts every mount below dir, the deepest first.
func unmountUnder(dir string) {
	text, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return
	}
	var points []string
	for _, line := range strings.Split(string(text), "\n") {
		fields := strings.Fields(line)
		if len(fields) > 4 && strings.HasPrefix(fields[4], dir+"/") {
			points = append(points, fields[4])
		}
	}
	for i := len(points) - 1; i >= 0; i-- {
		_ = syscall.Unmount(points[i], syscall.MNT_DETACH)
	}
}

// waitDial waits until address (on network: tcp or unix) takes a
// connection, for up to a minute, and fails early when a child has exited.
func (c *cluster) waitDial(name, network, address string) error {
	for try := 0; try < 600; try++ {
		if err := c.exited(); err != nil {
			return err
		}
		if connection, err := net.Dial(network, address); err == nil {
			connection.Close()
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("%s does not listen on %s; see %s", name, address, c.path(name+".log"))
}

func run(name string, args ...string) error {
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
