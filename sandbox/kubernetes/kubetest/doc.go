// Package kubetest is a Docker-backed stand-in for a Kubernetes node, for
// tests only: it serves pods/exec with Kubernetes' own streaming code (the
// kubelet's exec server and the API server's stream translator) in front
// of containers on this machine's Docker engine. See decision 0044.
package kubetest
