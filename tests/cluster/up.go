package main

// `vigil-cluster up DIR`: a whole control plane on loopback, supervised.
// It writes the cluster's PKI and an admin kubeconfig under DIR, starts etcd,
// kube-apiserver and kube-controller-manager as child processes (logs in
// DIR/*.log), waits until the API server is ready and the controller manager
// has made the default service account, then prints one JSON line describing
// the cluster on stdout. Then each line of its input is a command: `restart
// kube-apiserver` stops the API server, starts it again on the same port and
// store, waits until it is ready and prints the cluster's line again (its new
// PID). End of its input, SIGINT or SIGTERM stops every child by PID and
// exits, so a test process that dies takes its cluster with it. With
// `--node CONTAINERD_DIR` it starts a real node beside it (node.go), and
// `restart kubelet` is a command too.

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"
)

// The admission plugins a production cluster enables beyond the defaults.
const extraAdmission = "NodeRestriction,AlwaysPullImages"

type cluster struct {
	dir      string
	self     string
	ports    map[string]int
	children map[string]*child
	// node is set in node mode (node.go): a kubelet runs beside the control
	// plane, which then serves on the node's address.
	node *node
	// stop receives SIGINT and SIGTERM, also while the cluster starts.
	stop chan os.Signal
}

// A running component; done is closed when it has exited.
type child struct {
	command *exec.Cmd
	done    chan struct{}
}

// Ready is the line `up` prints once the cluster serves.
type Ready struct {
	Server     string         `json:"server"`
	Kubeconfig string         `json:"kubeconfig"`
	CA         string         `json:"ca"`
	Issuer     string         `json:"issuer"`
	Pids       map[string]int `json:"pids"`
	Version    string         `json:"version"`
	// In node mode: the node's name and the registry its images come from.
	Node     string `json:"node,omitempty"`
	Registry string `json:"registry,omitempty"`
}

const issuer = "https://kubernetes.default.svc.cluster.local"

// up starts the control plane in dir; with containerd, the directory of
// containerd's binaries, a node too.
func up(dir, containerd string) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(dir, "pki"), 0o700); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	c := &cluster{dir: dir, self: self, ports: map[string]int{}, children: map[string]*child{}}
	c.stop = make(chan os.Signal, 1)
	signal.Notify(c.stop, syscall.SIGINT, syscall.SIGTERM)
	defer c.stopAll()
	if containerd != "" {
		c.node = &node{containerd: containerd}
		if err := c.prepareNode(); err != nil {
			return fmt.Errorf("node: %w", err)
		}
	}
	for _, name := range []string{"etcd-client", "etcd-peer", "apiserver"} {
		if c.ports[name], err = freePort(); err != nil {
			return err
		}
	}
	if err := c.writePKI(); err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	if err := c.start("etcd", c.etcdArgs()); err != nil {
		return err
	}
	if err := c.start("kube-apiserver", c.apiserverArgs()); err != nil {
		return err
	}
	if err := c.waitReady(); err != nil {
		return err
	}
	if err := c.start("kube-controller-manager", c.controllerManagerArgs()); err != nil {
		return err
	}
	if err := c.waitDefaultServiceAccount(); err != nil {
		return err
	}
	if c.node != nil {
		if err := c.startNode(); err != nil {
			return fmt.Errorf("node: %w", err)
		}
	}
	if err := c.announce(); err != nil {
		return err
	}
	// Its input carries commands; its end is the signal to stop.
	commands := make(chan string)
	go func() {
		lines := bufio.NewScanner(os.Stdin)
		for lines.Scan() {
			commands <- lines.Text()
		}
		close(commands)
	}()
	for {
		select {
		case <-c.stop:
			return nil
		case command, open := <-commands:
			if !open {
				return nil
			}
			if err := c.run(command); err != nil {
				return err
			}
		}
	}
}

// run carries out one command of the input.
func (c *cluster) run(command string) error {
	switch {
	case command == "restart kube-apiserver":
		c.stopOne("kube-apiserver")
		if err := c.start("kube-apiserver", c.apiserverArgs()); err != nil {
			return err
		}
		if err := c.waitReady(); err != nil {
			return err
		}
	case command == "restart kubelet" && c.node != nil:
		// It reads its configuration again (DIR/kubelet/config.d).
		c.stopOne("kubelet")
		if err := c.startKubelet(); err != nil {
			return err
		}
		if err := c.waitNodeReady(2 * time.Minute); err != nil {
			return err
		}
	default:
		return fmt.Errorf("unknown command %q (known: restart kube-apiserver, in node mode restart kubelet)", command)
	}
	return c.announce()
}

func (c *cluster) path(parts ...string) string {
	return filepath.Join(append([]string{c.dir}, parts...)...)
}

func (c *cluster) server() string {
	return fmt.Sprintf("https://%s:%d", c.address(), c.ports["apiserver"])
}

// address is where the API server serves: loopback, or the node's address.
func (c *cluster) address() string {
	if c.node != nil {
		return nodeIP
	}
	return "127.0.0.1"
}

func (c *cluster) writePKI() error {
	pki := c.path("pki")
	ca, err := newAuthority(pki)
	if err != nil {
		return err
	}
	hosts := []string{c.address(), "localhost", "10.0.0.1", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}
	if err := ca.issue(pki, "apiserver", "kube-apiserver", nil, hosts); err != nil {
		return err
	}
	if err := ca.issue(pki, "admin", "vigil-cluster-admin", []string{"system:masters"}, nil); err != nil {
		return err
	}
	if err := ca.issue(pki, "controller-manager", "system:kube-controller-manager", nil, nil); err != nil {
		return err
	}
	if err := newSigningKey(pki); err != nil {
		return err
	}
	if c.node != nil {
		if err := c.writeNodePKI(ca); err != nil {
			return err
		}
	}
	for _, user := range []string{"admin", "controller-manager"} {
		if err := c.writeKubeconfig(user); err != nil {
			return err
		}
	}
	return os.WriteFile(c.path("audit-policy.yaml"), []byte(auditPolicy), 0o600)
}

// The audit log records every request of the service accounts in
// vigil-system (the agent's, the cleanup's), with its answer, and the Events
// and status objects they write whole (what an Event is about, what a
// status write changed): tests read it for refusals and count requests
// (DIR/audit.log, one JSON event per line).
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Request
  userGroups: ["system:serviceaccounts:vigil-system"]
  resources:
  - {group: "", resources: ["events"]}
  - {group: "events.k8s.io", resources: ["events"]}
  - {group: "vigil.dev", resources: ["vigilnodestatuses", "vigilpolicystatuses"]}
- level: Metadata
  userGroups: ["system:serviceaccounts:vigil-system"]
- level: None
`

func (c *cluster) writeKubeconfig(user string) error {
	pki := c.path("pki")
	config := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: vigil-cluster
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: %s
  user:
    client-certificate: %s
    client-key: %s
contexts:
- name: %s
  context:
    cluster: vigil-cluster
    user: %s
current-context: %s
`, c.server(), filepath.Join(pki, "ca.crt"), user, filepath.Join(pki, user+".crt"), filepath.Join(pki, user+".key"), user, user, user)
	return os.WriteFile(c.path(user+".conf"), []byte(config), 0o600)
}

func (c *cluster) etcdArgs() []string {
	client := fmt.Sprintf("http://127.0.0.1:%d", c.ports["etcd-client"])
	peer := fmt.Sprintf("http://127.0.0.1:%d", c.ports["etcd-peer"])
	return []string{
		"--name=vigil", "--data-dir=" + c.path("etcd"),
		"--listen-client-urls=" + client, "--advertise-client-urls=" + client,
		"--listen-peer-urls=" + peer, "--initial-advertise-peer-urls=" + peer,
		"--initial-cluster=vigil=" + peer, "--log-level=warn",
		"--quota-backend-bytes=4294967296", "--unsafe-no-fsync",
	}
}

func (c *cluster) apiserverArgs() []string {
	pki := c.path("pki")
	args := []string{
		fmt.Sprintf("--etcd-servers=http://127.0.0.1:%d", c.ports["etcd-client"]),
		"--bind-address=" + c.address(), "--advertise-address=" + c.address(),
		fmt.Sprintf("--secure-port=%d", c.ports["apiserver"]),
		"--tls-cert-file=" + filepath.Join(pki, "apiserver.crt"),
		"--tls-private-key-file=" + filepath.Join(pki, "apiserver.key"),
		"--client-ca-file=" + filepath.Join(pki, "ca.crt"),
		"--service-account-issuer=" + issuer,
		"--service-account-key-file=" + filepath.Join(pki, "sa.pub"),
		"--service-account-signing-key-file=" + filepath.Join(pki, "sa.key"),
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=" + extraAdmission,
		"--service-cluster-ip-range=10.0.0.0/24",
		"--allow-privileged=true",
		"--anonymous-auth=false",
		"--audit-policy-file=" + c.path("audit-policy.yaml"),
		"--audit-log-path=" + c.path("audit.log"),
		"--audit-log-format=json",
		"--profiling=false",
		"--v=1",
	}
	if c.node == nil {
		// The loopback address cannot be the kubernetes Service's endpoint;
		// nothing in these tests reaches the API server through it.
		return append(args, "--endpoint-reconciler-type=none")
	}
	return append(args,
		// The node has no name in DNS: the kubelet is asked at its address.
		"--kubelet-preferred-address-types=InternalIP",
		"--kubelet-client-certificate="+filepath.Join(pki, "apiserver-kubelet-client.crt"),
		"--kubelet-client-key="+filepath.Join(pki, "apiserver-kubelet-client.key"))
}

func (c *cluster) controllerManagerArgs() []string {
	pki := c.path("pki")
	// Without a kubelet, tests play it for their nodes, and the node
	// lifecycle controller would mark those nodes unreachable.
	controllers := "*,-node-lifecycle-controller"
	if c.node != nil {
		controllers = "*"
	}
	return []string{
		"--kubeconfig=" + c.path("controller-manager.conf"),
		"--authentication-kubeconfig=" + c.path("controller-manager.conf"),
		"--authorization-kubeconfig=" + c.path("controller-manager.conf"),
		"--service-account-private-key-file=" + filepath.Join(pki, "sa.key"),
		"--root-ca-file=" + filepath.Join(pki, "ca.crt"),
		"--use-service-account-credentials=true",
		"--leader-elect=false",
		"--bind-address=127.0.0.1", "--secure-port=0",
		"--controllers=" + controllers,
		"--v=1",
	}
}

// start starts the component name of this binary with args.
func (c *cluster) start(name string, args []string) error {
	return c.startBinary(name, c.self, nil, append([]string{name}, args...)...)
}

// startBinary starts binary as the child name, with env added to this
// process's environment, its output in DIR/name.log.
func (c *cluster) startBinary(name, binary string, env []string, args ...string) error {
	log, err := os.OpenFile(c.path(name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	command := exec.Command(binary, args...)
	command.Env = append(os.Environ(), env...)
	command.Stdout, command.Stderr = log, log
	// Its own process group, so that a ^C at the terminal reaches only `up`,
	// which then stops each child in order.
	command.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := command.Start(); err != nil {
		return fmt.Errorf("start %s: %w", name, err)
	}
	running := &child{command: command, done: make(chan struct{})}
	go func() { _ = command.Wait(); close(running.done) }()
	c.children[name] = running
	return nil
}

func (c *cluster) stopOne(name string) {
	running, ok := c.children[name]
	if !ok {
		return
	}
	delete(c.children, name)
	_ = running.command.Process.Signal(syscall.SIGTERM)
	select {
	case <-running.done:
	case <-time.After(15 * time.Second):
		_ = running.command.Process.Kill()
		<-running.done
	}
}

func (c *cluster) stopAll() {
	if c.node != nil {
		c.stopNode()
	}
	for _, name := range []string{"kube-controller-manager", "kube-apiserver", "etcd"} {
		c.stopOne(name)
	}
}

// adminClient speaks to the API server as the admin, over its real TLS.
func (c *cluster) adminClient() (*http.Client, error) {
	pki := c.path("pki")
	pair, err := tls.LoadX509KeyPair(filepath.Join(pki, "admin.crt"), filepath.Join(pki, "admin.key"))
	if err != nil {
		return nil, err
	}
	caPEM, err := os.ReadFile(filepath.Join(pki, "ca.crt"))
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	transport := &http.Transport{TLSClientConfig: &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: roots}}
	return &http.Client{Transport: transport, Timeout: 5 * time.Second}, nil
}

// poll asks path until it answers 200 or the time runs out, and fails early
// when a child has exited.
func (c *cluster) poll(path string, within time.Duration) error {
	client, err := c.adminClient()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	last := "no answer"
	for ctx.Err() == nil {
		select {
		case <-c.stop:
			return fmt.Errorf("stopped while waiting for %s", path)
		default:
		}
		if err := c.exited(); err != nil {
			return err
		}
		response, err := client.Get(c.server() + path)
		if err == nil {
			response.Body.Close()
			if response.StatusCode == http.StatusOK {
				return nil
			}
			last = response.Status
		} else {
			last = err.Error()
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("%s not ready within %s: %s", path, within, last)
}

// exited says which child has exited, if one has.
func (c *cluster) exited() error {
	for name, running := range c.children {
		select {
		case <-running.done:
			return fmt.Errorf("%s exited; see %s", name, c.path(name+".log"))
		default:
		}
	}
	return nil
}

func (c *cluster) waitReady() error {
	return c.poll("/readyz", 3*time.Minute)
}

func (c *cluster) waitDefaultServiceAccount() error {
	return c.poll("/api/v1/namespaces/default/serviceaccounts/default", 2*time.Minute)
}

func (c *cluster) announce() error {
	pids := map[string]int{}
	for name, running := range c.children {
		pids[name] = running.command.Process.Pid
	}
	ready := Ready{
		Server: c.server(), Kubeconfig: c.path("admin.conf"), CA: c.path("pki", "ca.crt"),
		Issuer: issuer, Pids: pids, Version: kubernetesVersion(),
	}
	if c.node != nil {
		ready.Node, ready.Registry = nodeName, c.registry()
	}
	line, err := json.Marshal(ready)
	if err != nil {
		return err
	}
	fmt.Println(string(line))
	return nil
}

// freePort picks a port that is free now, below the kernel's ephemeral range:
// one from the range, freed again until its server binds it, could be taken
// meanwhile by an outgoing connection (the agents reconnecting while the API
// server restarts make hundreds).
func freePort() (int, error) {
	low := ephemeralLow()
	for try := 0; try < 100 && low > lowestPort; try++ {
		port := lowestPort + rand.IntN(low-lowestPort)
		listener, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		listener.Close()
		return port, nil
	}
	return 0, fmt.Errorf("no free port in %d-%d", lowestPort, low-1)
}

// The lowest port freePort picks: above those services usually take.
const lowestPort = 10000

// ephemeralLow is where the kernel's range for outgoing connections starts.
func ephemeralLow() int {
	text, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	var low, high int
	if _, err := fmt.Sscan(string(text), &low, &high); err != nil {
		return 32768
	}
	return low
}
