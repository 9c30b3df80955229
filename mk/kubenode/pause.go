//go:build ignore

// The Pod sandbox ("pause") image of the real node (mk/kubenode.sh): there is
// no registry here to pull registry.k8s.io/pause from, so the node's
// containerd gets this, built with CGO off and written as a FROM-scratch
// image by `sandboxd agent-image --binary`. Like the upstream pause it holds
// the Pod's namespaces and waits: it exits 0 on SIGTERM or SIGINT, and reaps
// any child it inherits, as PID 1 of the sandbox must.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 4)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for s := range sig {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
