// Command vigil-cluster is the upstream Kubernetes control plane that vigil's
// tests run against: etcd, kube-apiserver, kube-controller-manager and kubectl,
// and for a real node kube-scheduler, the kubelet and kube-proxy, each built
// from its own project's Go module at the version go.mod pins, and linked
// into one binary so that one build serves them all. The first argument
// names the component; the rest are that component's own flags, unchanged.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"go.etcd.io/etcd/server/v3/etcdmain"
	"k8s.io/component-base/cli"
	"k8s.io/component-base/version"
	kubectl "k8s.io/kubectl/pkg/cmd"
	kubectlutil "k8s.io/kubectl/pkg/cmd/util"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	proxy "k8s.io/kubernetes/cmd/kube-proxy/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"
)

const usage = "usage: vigil-cluster up [--node CONTAINERD_DIR] DIR | etcd|kube-apiserver|kube-controller-manager|kube-scheduler|kubelet|kube-proxy|kubectl [flags]"

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	}
	component, args := os.Args[1], os.Args[2:]
	switch component {
	case "up":
		containerd := ""
		if len(args) == 3 && args[0] == "--node" {
			containerd, args = args[1], args[2:]
		}
		if len(args) != 1 {
			fmt.Fprintln(os.Stderr, usage)
			os.Exit(2)
		}
		if err := up(args[0], containerd); err != nil {
			fmt.Fprintf(os.Stderr, "vigil-cluster up: %v\n", err)
			os.Exit(1)
		}
	case "etcd":
		etcdmain.Main(append([]string{"etcd"}, args...))
	case "kubectl":
		command := kubectl.NewDefaultKubectlCommand()
		command.SetArgs(args)
		if err := cli.RunNoErrOutput(command); err != nil {
			// As kubectl's own main reports it.
			kubectlutil.CheckErr(err)
		}
	default:
		server, ok := servers[component]
		if !ok {
			fmt.Fprintf(os.Stderr, "vigil-cluster: no component %q\n", component)
			os.Exit(2)
		}
		command := server()
		command.SetArgs(args)
		os.Exit(cli.Run(command))
	}
}

// The components that are a cobra command, by name.
var servers = map[string]func() *cobra.Command{
	"kube-apiserver":          apiserver.NewAPIServerCommand,
	"kube-controller-manager": controllermanager.NewControllerManagerCommand,
	"kube-scheduler":          func() *cobra.Command { return scheduler.NewSchedulerCommand() },
	"kubelet":                 func() *cobra.Command { return kubelet.NewKubeletCommand(context.Background()) },
	"kube-proxy":              proxy.NewProxyCommand,
}

// kubernetesVersion is the version build.sh stamps into the binary.
func kubernetesVersion() string {
	return version.Get().GitVersion
}
