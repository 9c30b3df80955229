// Package kubenode is the real-node tier of the Kubernetes runtime
// (docs/decisions/0049): the e2e security suite and the executor suites
// against Pods that a real kubelet runs on this machine, through
// containerd and runc, brought up by `make kubenode` (mk/kubenode.sh). Its
// tests skip unless SANDBOXD_KUBENODE_KUBECONFIG names the running node's
// kubeconfig; `make test-kubenode` sets it.
// Its files build with -tags kubernetes only (client-go), as the daemon's
// Kubernetes backend does.
package kubenode
