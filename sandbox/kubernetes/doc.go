// Package kubernetes runs sandboxd's sessions as Pods on a Kubernetes
// cluster (issue 25). The agent is reached only through pods/exec: see
// ExecFunc and NewExec (WebSocket v5 first, SPDY fallback) and decision
// 0044.
package kubernetes
