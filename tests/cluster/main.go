// Command vigil-cluster is the upstream Kubernetes control plane that vigil's
// tests run against: etcd, kube-apiserver, kube-controller-manager and kubectl,
// each built from its own project's Go module at the version go.mod pins, and
// linked into one binary so that one build serves them all. The first argument
// names the component; the rest are that component's own flags, unchanged.
package main

import (
	"fmt"
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
	"k8s.io/component-base/cli"
	"k8s.io/component-base/version"
	kubectl "k8s.io/kubectl/pkg/cmd"
	kubectlutil "k8s.io/kubectl/pkg/cmd/util"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: vigil-cluster up DIR | etcd|kube-apiserver|kube-controller-manager|kubectl [flags]")
		os.Exit(2)
	}
	component, args := os.Args[1], os.Args[2:]
	switch component {
	case "up":
		if len(args) != 1 {
			fmt.Fprintln(os.Stderr, "usage: vigil-cluster up DIR")
			os.Exit(2)
		}
		if err := up(args[0]); err != nil {
			fmt.Fprintf(os.Stderr, "vigil-cluster up: %v\n", err)
			os.Exit(1)
		}
	case "etcd":
		etcdmain.Main(append([]string{"etcd"}, args...))
	case "kube-apiserver":
		command := apiserver.NewAPIServerCommand()
		command.SetArgs(args)
		os.Exit(cli.Run(command))
	case "kube-controller-manager":
		command := controllermanager.NewControllerManagerCommand()
		command.SetArgs(args)
		os.Exit(cli.Run(command))
	case "kubectl":
		command := kubectl.NewDefaultKubectlCommand()
		command.SetArgs(args)
		if err := cli.RunNoErrOutput(command); err != nil {
			// As kubectl's own main reports it.
			kubectlutil.CheckErr(err)
		}
	default:
		fmt.Fprintf(os.Stderr, "vigil-cluster: no component %q\n", component)
		os.Exit(2)
	}
}

// kubernetesVersion is the version build.sh stamps into the binary.
func kubernetesVersion() string {
	return version.Get().GitVersion
}
