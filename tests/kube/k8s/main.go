// Command kube is a multicall wrapper around the unmodified upstream kube-apiserver and
// kube-scheduler commands, so the test control plane links one binary instead of two.
//
//	kube apiserver --etcd-servers=... ...
//	kube scheduler --kubeconfig=... ...
package main

import (
	"fmt"
	"os"

	"k8s.io/component-base/cli"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: kube apiserver|scheduler [flags]")
		os.Exit(2)
	}
	which := os.Args[1]
	os.Args = append([]string{"kube-" + which}, os.Args[2:]...)
	switch which {
	case "apiserver":
		os.Exit(cli.Run(apiserver.NewAPIServerCommand()))
	case "scheduler":
		os.Exit(cli.Run(scheduler.NewSchedulerCommand()))
	default:
		fmt.Fprintf(os.Stderr, "kube: unknown component %q (want apiserver or scheduler)\n", which)
		os.Exit(2)
	}
}
