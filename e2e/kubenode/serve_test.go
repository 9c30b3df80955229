//go:build kubernetes

package kubenode

import (
	"context"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandboxd/sandboxd/internal/testenv"
)

// TestServeOnRealNode: the daemon as shipped (`sandboxd serve --backend
// kubernetes`, built with -tags kubernetes) against the real node, with
// the flags this node needs, its Pods placed by the node's kube-scheduler
// (nothing pins them): `sandboxd run` gets a session there, as uid 1000,
// and nothing is left after the daemon stops.
func TestServeOnRealNode(t *testing.T) {
	if !node.Scheduler {
		t.Skip("the node runs no kube-scheduler (node.env names none): a daemon's Pods would stay Pending")
	}
	ctx := ctxT(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "sandboxd-kubernetes")
	root, err := testenv.RepoRoot()
	require.NoError(t, err)
	build := exec.CommandContext(ctx, "go", "build", "-tags", "kubernetes", "-trimpath", "-o", bin, "./cmd/sandboxd")
	build.Dir, build.Env = root, append(os.Environ(), "CGO_ENABLED=0")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "building sandboxd with -tags kubernetes: %s", out)

	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	require.NoError(t, l.Close())
	const token = "kubenode-operator-token-of-at-least-32-characters"
	logf, err := os.Create(filepath.Join(dir, "daemon.log"))
	require.NoError(t, err)
	daemon := exec.Command(bin, "serve", "--backend", "kubernetes",
		"--kubeconfig", node.Kubeconfig, "--namespace", node.Namespace,
		"--agent-image", agentImage, "--image", node.TestImage,
		"--kube-agent-volume", "init", "--kube-host-users", "--kube-network-policy-enforced",
		"--label", labelRun+"="+runID,
		"--listen", "127.0.0.1:"+port, "--state-dir", filepath.Join(dir, "state"))
	daemon.Env = append(os.Environ(), "SANDBOXD_TOKEN="+token)
	daemon.Stdout, daemon.Stderr = logf, logf
	require.NoError(t, daemon.Start())
	exited := make(chan struct{})
	var exitErr error
	go func() { exitErr = daemon.Wait(); close(exited) }()
	var stopOnce sync.Once
	stop := func() {
		stopOnce.Do(func() {
			_ = daemon.Process.Signal(syscall.SIGTERM)
			select {
			case <-exited:
			case <-time.After(time.Minute):
				_ = daemon.Process.Kill()
				<-exited
			}
			logf.Close()
		})
	}
	t.Cleanup(stop)
	logTail := func() string { b, _ := os.ReadFile(logf.Name()); return string(b) }

	for deadline := time.Now().Add(2 * time.Minute); ; {
		resp, err := http.Get("http://127.0.0.1:" + port + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		select {
		case <-exited:
			t.Fatalf("the daemon exited (%v): %s", exitErr, logTail())
		case <-time.After(200 * time.Millisecond):
		}
		require.True(t, time.Now().Before(deadline), "no /healthz in 2 min: %s", logTail())
	}

	// Pods pinned to a node (the other tests') get no Scheduled event.
	scheduled := func() int {
		events, err := client.CoreV1().Events(node.Namespace).List(ctx, metav1.ListOptions{FieldSelector: "reason=Scheduled"})
		require.NoError(t, err)
		n := 0
		for _, e := range events.Items {
			if e.InvolvedObject.Kind == "Pod" && strings.HasPrefix(e.InvolvedObject.Name, "sbx-") {
				n++
			}
		}
		return n
	}
	before := scheduled()
	start := time.Now()
	// A bound of its own: run retries a busy create for minutes.
	runCtx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	run := exec.CommandContext(runCtx, bin, "run", "--", "id -u; grep CapEff /proc/self/status; echo ran-on-the-real-node")
	run.Env = append(os.Environ(), "SANDBOXD_URL=ws://127.0.0.1:"+port+"/v1/ws", "SANDBOXD_TOKEN="+token)
	got, err := run.CombinedOutput()
	require.NoError(t, err, "sandboxd run: %s\ndaemon log: %s", got, logTail())
	t.Logf("sandboxd run (create, command, close) in %v: %s", time.Since(start).Round(time.Millisecond), got)
	assert.Contains(t, string(got), "1000\n")
	assert.Contains(t, string(got), "CapEff:\t0000000000000000")
	assert.Contains(t, string(got), "ran-on-the-real-node")
	assert.Greater(t, scheduled(), before, "the kube-scheduler placed the session's Pod (the daemon names no node)")
	stop()
	nothingLeft(ctx, t)
}
