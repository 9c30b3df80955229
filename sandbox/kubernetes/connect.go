package kubernetes

import (
	"context"
	"fmt"
	"io"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandboxd/sandboxd/sandbox"
)

// Connect opens a new stream to the agent of a running sandbox: pods/exec
// of sandbox.ProxyCommand in its container (after a daemon restart, or
// when a stream breaks).
func (r *Runtime) Connect(ctx context.Context, sessionID string) (io.ReadWriteCloser, error) {
	if err := checkSessionID(sessionID); err != nil {
		return nil, err
	}
	name := PodName(sessionID)
	cctx, cancel := r.call(ctx)
	pod, err := r.cli.CoreV1().Pods(r.cfg.Namespace).Get(cctx, name, metav1.GetOptions{})
	cancel()
	if err != nil {
		return nil, wrap(err, "session %s: reading its Pod", sessionID)
	}
	if st := statusOf(pod); !st.Running {
		return nil, fmt.Errorf("session %s: its Pod %s does not run: %s", sessionID, name, st.Describe())
	}
	rwc, err := r.exec(ctx, r.cfg.Namespace, name, ContainerName, sandbox.ProxyCommand())
	if err != nil {
		return nil, wrap(err, "session %s: pods/exec of the agent proxy", sessionID)
	}
	return r.w.track(sessionID, rwc), nil
}
