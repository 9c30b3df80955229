// Package kubernetes is the Kubernetes runtime's real-stream tier (issue
// 25, T2): a sandbox.Manager over the runtime of sandbox/kubernetes, with
// the fake clientset as the cluster and a kubetest node running each Pod
// as a container on this machine's Docker engine. Every agent stream is
// a real pods/exec: client-go's executor, the API server's stream
// translator (v5 WebSocket) or upgrade-aware proxy (SPDY), the kubelet's
// streaming server, then docker exec into the Pod's container. There is
// no kube-apiserver and no kubelet here (e2e/kubeapi has the former);
// the node maps the Pod spec to Docker, so what the security checks read
// back is the node's mapping of the runtime's Pod, not a kubelet's.
package kubernetes

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/client"
	"github.com/google/uuid"
	"go.uber.org/goleak"

	"github.com/sandboxd/sandboxd/internal/testenv"
)

var (
	agentBinary string
	testImage   string
	runID       string
	docker      *client.Client
)

// labelRun scopes every resource of a run.
const labelRun = "e2e.kubernetes.run"

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		fmt.Println("e2e/kubernetes: skipped with -short")
		os.Exit(0)
	}
	code, err := run(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e/kubernetes:", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

func run(m *testing.M) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var err error
	docker, err = client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return 0, err
	}
	if _, err := docker.Ping(ctx); err != nil {
		docker.Close()
		fmt.Println("e2e/kubernetes: skipped, no Docker engine:", err)
		return 0, nil
	}
	runID = uuid.NewString()[:12]
	tmp, err := os.MkdirTemp("", "sandboxd-e2e-k8s-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(tmp)
	if agentBinary, err = testenv.BuildBinary(ctx, tmp); err != nil {
		return 0, err
	}
	if testImage, err = testenv.EnsureTestImage(ctx, docker); err != nil {
		return 0, err
	}

	code := m.Run()

	ctx, cancel = context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if left := testenv.Leftovers(ctx, docker, labelRun, runID); len(left) > 0 {
		fmt.Fprintf(os.Stderr, "e2e/kubernetes: resources left behind: %s\n", strings.Join(left, ", "))
		code = 1
	}
	docker.Close()
	if code == 0 {
		// client-go's exec streams leave goroutines that end on their own
		// within seconds of a cut stream (spdystream's shutdown, the
		// WebSocket heartbeat's next ping): wait for them, bounded.
		deadline := time.Now().Add(time.Minute)
		err := goleak.Find()
		for err != nil && time.Now().Before(deadline) {
			time.Sleep(200 * time.Millisecond)
			err = goleak.Find()
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "e2e/kubernetes: goroutine leak:", err)
			code = 1
		}
	}
	return code, nil
}
