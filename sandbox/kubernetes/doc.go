// Package kubernetes runs sandboxd's sessions as Pods on a Kubernetes
// cluster (issue 25, decision 0043): one Pod per session, placed by the
// cluster's scheduler. The agent is reached only through pods/exec of
// sandbox.ProxyCommand: see ExecFunc and NewExec (WebSocket v5 first, SPDY
// fallback) and decision 0044. New(Config) makes the Runtime.
//
// The Pod (pod.go) is `sbx-<session>` in Config.Namespace: restartPolicy
// Never, no service account token, no service links, user namespaces
// (hostUsers: false), non-root with every capability dropped, no privilege
// escalation, a read-only root, seccomp RuntimeDefault (or the operator's
// Localhost profile), limits on CPU, memory and ephemeral storage, and
// emptyDir volumes with size limits where the Docker runtime has volumes
// and tmpfs mounts (/workspace, the home folder, /tmp, /run/sandboxd). The
// agent binary comes from Config.AgentImage, an OCI image holding the
// static sandboxd binary at /sandboxd, mounted as an image volume or
// copied by an init container (Config.AgentVolume). Every Pod passes the
// Pod Security "restricted" level.
//
// The operations, one per file: Start (start.go: the NetworkPolicy and the
// Pod, a wait for Running on the runtime's watch, then pods/exec of the
// agent proxy, retried until the agent answers a ping), Connect
// (connect.go), Claim (claim.go: a merge patch guarded by
// resourceVersion, so of two daemons racing for one pooled Pod exactly one
// wins and the other gets sandbox.ErrClaimed), Inspect (inspect.go: the
// Pod's status, with eviction, OOM kills and deadlines named), List
// (list.go), Remove (remove.go: NotFound is success). watch.go is the one
// watch on the scope's Pods: it wakes a waiting Start and ends the streams
// of a session whose Pod was deleted, evicted, OOM-killed or ran past its
// deadline, so the manager inspects it and fails the session with that
// reason at once; events.go watches the Warning Events about Pods, so a
// start names why the kubelet cannot run its Pod (decision 0048).
// network.go maps the session's network to a NetworkPolicy; skills.go
// brings the session's skills: a ConfigMap of their archive (skilltar),
// unpacked by an init container into a volume mounted read-only at
// /skills. klog.go routes client-go's log through the daemon's slog.
//
// What this runtime does not do yet answers with a *sandbox.UnsupportedError
// naming it (CheckOptions, options.go): MCP sidecars, the direct path,
// disk quotas (Kubernetes evicts a Pod past its size limits rather than
// failing a write with ENOSPC), editable paths, the
// image's user, shell_init and entrypoint (they need the image's
// configuration, which the daemon does not read on a cluster), operator
// networks by name. Sessions whose network needs a NetworkPolicy (all of
// them: none, bridge, allow_hosts) are refused unless the operator
// declares that the cluster enforces NetworkPolicies
// (Config.NetworkPolicyEnforced): enforcement depends on the network
// plugin and cannot be read from the API.
package kubernetes
