// Command kube is a multicall wrapper around the unmodified upstream kube-apiserver,
// kube-scheduler and kube-controller-manager commands, so the test control plane links one
// binary instead of three.
//
//	kube apiserver --etcd-servers=... ...
//	kube scheduler --kubeconfig=... ...
//	kube controller-manager --kubeconfig=... --controllers=attachdetach,... ...
package main

import (
	"fmt"
	"os"

	"k8s.io/component-base/cli"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: kube apiserver|scheduler|controller-manager [flags]")
		os.Exit(2)
	}
	which := os.Args[1]
	os.Args = append([]string{"kube-" + which}, os.Args[2:]...)
	switch which {
	case "apiserver":
		os.Exit(cli.Run(apiserver.NewAPIServerCommand()))
	case "scheduler":
		os.Exit(cli.Run(scheduler.NewSchedulerCommand()))
	case "controller-manager":
		os.Exit(cli.Run(controllermanager.NewControllerManagerCommand()))
	default:
		fmt.Fprintf(os.Stderr, "kube: unknown component %q (want apiserver, scheduler or controller-manager)\n", which)
		os.Exit(2)
	}
}
