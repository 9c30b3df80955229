//go:build kubernetes

package kubenode

import (
	"context"
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/google/uuid"
	"go.uber.org/goleak"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	kclient "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/sandboxd/sandboxd/internal/testenv"
)

var (
	node       *Node
	client     kclient.Interface
	agentImage string // the agent built from this tree, imported for the run
	runID      string
)

// labelRun is on every Pod and NetworkPolicy of a run.
const labelRun = "e2e.kubenode.run"

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		fmt.Println("kubenode: skipped with -short")
		os.Exit(0)
	}
	code, err := run(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kubenode:", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

func run(m *testing.M) (int, error) {
	kubeconfig := os.Getenv(EnvKubeconfig)
	if kubeconfig == "" {
		fmt.Printf("kubenode: skipped, %s is not set (make kubenode brings a real node up; make test-kubenode runs this)\n", EnvKubeconfig)
		return 0, nil
	}
	var err error
	if node, err = Open(kubeconfig); err != nil {
		return 0, err
	}
	// A client of its own, so its idle connection is closed before the
	// leak check (the node's apiserver outlives the run).
	hc, err := rest.HTTPClientFor(node.REST)
	if err != nil {
		return 0, err
	}
	defer utilnet.CloseIdleConnectionsFor(hc.Transport)
	if client, err = kclient.NewForConfigAndClient(node.REST, hc); err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := client.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{}); err != nil {
		return 0, fmt.Errorf("the node %s (make kubenode): %w", node.Name, err)
	}
	runID = uuid.NewString()[:12]
	tmp, err := os.MkdirTemp("", "sandboxd-e2e-kubenode-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(tmp)
	bin, err := testenv.BuildBinary(ctx, tmp)
	if err != nil {
		return 0, err
	}
	// A tag of its own (not latest, so the Pods' pull policy is
	// IfNotPresent: there is no registry), removed after the run.
	if agentImage, err = node.ImportAgent(ctx, bin, "sandboxd-agent:e2e-"+runID); err != nil {
		return 0, err
	}

	code := m.Run()

	ctx, cancel = context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := node.RemoveImage(ctx, agentImage); err != nil {
		fmt.Fprintln(os.Stderr, "kubenode: removing the agent image:", err)
	}
	sel := metav1.ListOptions{LabelSelector: labelRun + "=" + runID}
	pods, err := client.CoreV1().Pods(node.Namespace).List(ctx, sel)
	if err != nil {
		return code, err
	}
	nps, err := client.NetworkingV1().NetworkPolicies(node.Namespace).List(ctx, sel)
	if err != nil {
		return code, err
	}
	if n := len(pods.Items) + len(nps.Items); n > 0 {
		fmt.Fprintf(os.Stderr, "kubenode: left behind: %d Pods, %d NetworkPolicies\n", len(pods.Items), len(nps.Items))
		code = 1
	}
	// client-go's round trippers wrap the transport: unwrapped, it closes.
	utilnet.CloseIdleConnectionsFor(hc.Transport)
	if code == 0 {
		// client-go's exec streams leave goroutines that end on their own
		// within seconds of a cut stream: wait for them, bounded.
		deadline := time.Now().Add(15 * time.Second)
		err := goleak.Find()
		for err != nil && time.Now().Before(deadline) {
			time.Sleep(200 * time.Millisecond)
			err = goleak.Find()
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "kubenode: goroutine leak:", err)
			code = 1
		}
	}
	return code, nil
}
