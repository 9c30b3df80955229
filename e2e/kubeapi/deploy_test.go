package kubeapi

import (
	"bytes"
	"context"
	"errors"
	"io"
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
	appsv1 "k8s.io/api/apps/v1"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	kclient "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"

	"github.com/sandboxd/sandboxd/internal/testenv"
)

// The names deploy/kubernetes uses.
const (
	deployNamespace   = "sandboxd"
	sessionsNamespace = "sandboxd-sessions"
	deployAccount     = "sandboxd"
	imagePlaceholder  = "REGISTRY/sandboxd-agent:TAG"
	t3AgentImage      = "sandboxd-agent:t3"
)

// deployManifests are the files kubectl apply -k applies, in its order.
var deployManifests = []string{"namespaces.yaml", "rbac.yaml", "deployment.yaml", "service.yaml"}

func deployDir(t *testing.T) string {
	t.Helper()
	root, err := testenv.RepoRoot()
	require.NoError(t, err)
	return filepath.Join(root, "deploy", "kubernetes")
}

// readManifests decodes the objects of the deployment's files, with the
// image placeholder replaced.
func readManifests(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	var objs []*unstructured.Unstructured
	for _, f := range deployManifests {
		b, err := os.ReadFile(filepath.Join(deployDir(t), f))
		require.NoError(t, err)
		b = bytes.ReplaceAll(b, []byte(imagePlaceholder), []byte(t3AgentImage))
		dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
		for {
			var obj unstructured.Unstructured
			err := dec.Decode(&obj.Object)
			if errors.Is(err, io.EOF) {
				break
			}
			require.NoError(t, err, f)
			if len(obj.Object) > 0 {
				objs = append(objs, &obj)
			}
		}
	}
	return objs
}

// applyManifests server-side applies the deployment's objects, for real
// (dryRun false) or as a server dry run: the API server validates and
// admits them either way.
func applyManifests(ctx context.Context, t *testing.T, cfg *rest.Config, objs []*unstructured.Unstructured, dryRun bool) {
	t.Helper()
	dyn, err := dynamic.NewForConfig(cfg)
	require.NoError(t, err)
	cli, err := kclient.NewForConfig(cfg)
	require.NoError(t, err)
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(cli.Discovery()))
	opts := metav1.PatchOptions{FieldManager: "sandboxd-t3", Force: new(true)}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	for _, obj := range objs {
		gvk := obj.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		require.NoError(t, err, "%s", gvk)
		data, err := obj.MarshalJSON()
		require.NoError(t, err)
		var r dynamic.ResourceInterface = dyn.Resource(m.Resource)
		if ns := obj.GetNamespace(); ns != "" {
			r = dyn.Resource(m.Resource).Namespace(ns)
		}
		_, err = r.Patch(ctx, obj.GetName(), types.ApplyPatchType, data, opts)
		require.NoError(t, err, "applying %s %s/%s", gvk.Kind, obj.GetNamespace(), obj.GetName())
	}
}

// TestDeployManifests applies deploy/kubernetes to the real API server:
// kubectl's server dry run of the kustomization (when kubectl is here),
// then a server-side apply for real; the daemon's Pod, as its Deployment
// makes it, passes the restricted level its namespace enforces; and the
// daemon's ServiceAccount may do exactly what the runtime does, in the
// sessions' namespace only.
func TestDeployManifests(t *testing.T) {
	ctx := testContext(t)
	objs := readManifests(t)
	kinds := map[string]int{}
	for _, o := range objs {
		kinds[o.GetKind()]++
	}
	assert.Equal(t, map[string]int{"Namespace": 2, "ServiceAccount": 1, "Role": 1, "RoleBinding": 1, "ClusterRole": 1,
		"ClusterRoleBinding": 1, "Deployment": 1, "Service": 1}, kinds)
	// The namespaces first: a dry run does not make them, and the rest
	// live in them.
	applyManifests(ctx, t, kube.admin, objs[:2], false)

	if kubectl, err := exec.LookPath("kubectl"); err != nil {
		t.Log("kubectl not installed: the kustomization not checked with kubectl (the objects are below)")
	} else {
		out, err := exec.CommandContext(ctx, kubectl, "--kubeconfig", kube.kubeconfig, "apply", "--server-side", "--dry-run=server", "-k", deployDir(t)).CombinedOutput()
		require.NoError(t, err, "kubectl apply --server-side --dry-run=server -k deploy/kubernetes: %s", out)
		for _, want := range []string{"serviceaccount/sandboxd", "role.rbac.authorization.k8s.io/sandboxd-runtime", "deployment.apps/sandboxd", "service/sandboxd"} {
			assert.Contains(t, string(out), want+" serverside-applied (server dry run)")
		}
	}
	applyManifests(ctx, t, kube.admin, objs, false)

	// PodSecurity only warns about a Deployment; a Pod made from its
	// template is what the namespace's enforce label judges.
	dep, err := kube.client.AppsV1().Deployments(deployNamespace).Get(ctx, "sandboxd", metav1.GetOptions{})
	require.NoError(t, err)
	pod := podFromTemplate(dep)
	_, err = kube.client.CoreV1().Pods(deployNamespace).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	require.NoError(t, err, "the daemon's Pod passes restricted")
	bare := pod.DeepCopy()
	bare.Spec.Containers[0].SecurityContext = nil
	_, err = kube.client.CoreV1().Pods(deployNamespace).Create(ctx, bare, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	require.Error(t, err, "the namespace enforces restricted")
	assert.Contains(t, err.Error(), "violates PodSecurity")

	daemon := serviceAccountClient(ctx, t, deployNamespace, deployAccount)
	can := func(ns, group, resource, sub, verb, name string) bool {
		t.Helper()
		r, err := daemon.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authzv1.SelfSubjectAccessReview{
			Spec: authzv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authzv1.ResourceAttributes{
				Namespace: ns, Group: group, Resource: resource, Subresource: sub, Verb: verb, Name: name,
			}},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
		return r.Status.Allowed
	}
	for _, verb := range []string{"create", "get", "list", "watch", "patch", "delete"} {
		assert.True(t, can(sessionsNamespace, "", "pods", "", verb, ""), "pods %s", verb)
		assert.False(t, can(deployNamespace, "", "pods", "", verb, ""), "pods %s in the daemon's own namespace", verb)
		assert.False(t, can("default", "", "pods", "", verb, ""), "pods %s elsewhere", verb)
	}
	for _, verb := range []string{"create", "get"} {
		assert.True(t, can(sessionsNamespace, "", "pods", "exec", verb, "x"), "pods/exec %s", verb)
	}
	for _, verb := range []string{"create", "list", "delete"} {
		assert.True(t, can(sessionsNamespace, "networking.k8s.io", "networkpolicies", "", verb, ""), "networkpolicies %s", verb)
	}
	for _, verb := range []string{"create", "list", "delete"} {
		assert.True(t, can(sessionsNamespace, "", "configmaps", "", verb, ""), "configmaps %s", verb)
	}
	for _, verb := range []string{"list", "watch"} {
		assert.True(t, can(sessionsNamespace, "", "events", "", verb, ""), "events %s", verb)
		assert.False(t, can(deployNamespace, "", "events", "", verb, ""), "events %s in the daemon's own namespace", verb)
	}
	assert.True(t, can(sessionsNamespace, "", "namespaces", "", "get", sessionsNamespace))
	assert.True(t, can("", "node.k8s.io", "runtimeclasses", "", "get", "gvisor"))
	for _, denied := range []struct{ group, resource, sub, verb string }{
		{"", "pods", "", "update"},
		{"", "pods", "attach", "create"},
		{"", "pods", "portforward", "create"},
		{"", "pods", "ephemeralcontainers", "patch"},
		{"", "secrets", "", "get"},
		{"", "secrets", "", "list"},
		{"", "configmaps", "", "get"},
		{"", "configmaps", "", "update"},
		{"", "configmaps", "", "patch"},
		{"", "configmaps", "", "watch"},
		{"", "events", "", "create"},
		{"", "events", "", "get"},
		{"", "events", "", "delete"},
		{"events.k8s.io", "events", "", "list"},
		{"", "serviceaccounts", "token", "create"},
		{"networking.k8s.io", "networkpolicies", "", "patch"},
		{"rbac.authorization.k8s.io", "roles", "", "create"},
	} {
		assert.False(t, can(sessionsNamespace, denied.group, denied.resource, denied.sub, denied.verb, ""), "%+v", denied)
	}
	assert.False(t, can("", "", "namespaces", "", "list", ""), "no namespace listing")
	assert.False(t, can("", "", "nodes", "", "get", "n"), "no nodes")
}

// podFromTemplate is the Pod a Deployment's ReplicaSet would make.
func podFromTemplate(dep *appsv1.Deployment) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: dep.Name + "-t3", Labels: dep.Spec.Template.Labels},
		Spec:       *dep.Spec.Template.Spec.DeepCopy(),
	}
}

// serviceAccountClient is a clientset authenticated as a ServiceAccount,
// with a token from the TokenRequest API (what a kubelet mounts in its Pod).
func serviceAccountClient(ctx context.Context, t *testing.T, ns, name string) kclient.Interface {
	t.Helper()
	tok, err := kube.client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name,
		&authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{ExpirationSeconds: new(int64(3600))}}, metav1.CreateOptions{})
	require.NoError(t, err)
	cfg := rest.CopyConfig(kube.admin)
	cfg.BearerToken = tok.Status.Token
	cli, err := kclient.NewForConfig(cfg)
	require.NoError(t, err)
	who, err := cli.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authnv1.SelfSubjectReview{}, metav1.CreateOptions{})
	require.NoError(t, err)
	require.Equal(t, "system:serviceaccount:"+ns+":"+name, who.Status.UserInfo.Username)
	return cli
}

// kubeBinary is sandboxd built with the Kubernetes backend (make
// build-kubernetes), as the deployment's image holds it.
func kubeBinary(t *testing.T) string {
	t.Helper()
	root, err := testenv.RepoRoot()
	require.NoError(t, err)
	out := filepath.Join(t.TempDir(), "sandboxd-kubernetes")
	// A cold build of client-go under load took over 2 min: only a hang
	// should fail this bound.
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-tags", "kubernetes", "-trimpath", "-o", out, "./cmd/sandboxd")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "building sandboxd with -tags kubernetes: %s", b)
	return out
}

// TestDeployedDaemon runs the daemon with the arguments of
// deploy/kubernetes's Deployment, as its ServiceAccount (a kubeconfig of a
// TokenRequest token in place of the in-cluster config), against the real
// API server: as shipped (no NetworkPolicy declaration) it refuses to
// start, naming it; declared, it serves, and `sandboxd run` gets a session
// in sandboxd-sessions on the test node (which binds the Pods: there is no
// scheduler), with only the Role's verbs; nothing is left after.
func TestDeployedDaemon(t *testing.T) {
	// Built before the test's context starts: the build has its own bound,
	// and under load it took most of the test's 5 min (issue 23).
	bin := kubeBinary(t)
	ctx := testContext(t)
	applyManifests(ctx, t, kube.admin, readManifests(t), false)
	// What a controller-manager would make: the default ServiceAccount the
	// sessions' Pods run as (without a token).
	_, err := kube.client.CoreV1().ServiceAccounts(sessionsNamespace).Create(ctx,
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		require.NoError(t, err)
	}
	dep, err := kube.client.AppsV1().Deployments(deployNamespace).Get(ctx, "sandboxd", metav1.GetOptions{})
	require.NoError(t, err)
	args := dep.Spec.Template.Spec.Containers[0].Args
	require.Equal(t, "serve", args[0])

	tok, err := kube.client.CoreV1().ServiceAccounts(deployNamespace).CreateToken(ctx, deployAccount,
		&authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{ExpirationSeconds: new(int64(3600))}}, metav1.CreateOptions{})
	require.NoError(t, err)
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	require.NoError(t, kube.writeKubeconfig(kubeconfig, "system:serviceaccount:sandboxd:sandboxd", tok.Status.Token))
	port, err := freePort()
	require.NoError(t, err)
	// The Deployment's arguments but where they name the Pod's world: the
	// address, the state folder, and the cluster (a kubeconfig, not the
	// in-cluster config); the sessions' image is the test image.
	var daemonArgs []string
	for _, a := range args {
		switch {
		case strings.HasPrefix(a, "--listen="):
			a = "--listen=127.0.0.1:" + strconv.Itoa(port)
		case strings.HasPrefix(a, "--state-dir="):
			a = "--state-dir=" + filepath.Join(dir, "state")
		}
		daemonArgs = append(daemonArgs, a)
	}
	daemonArgs = append(daemonArgs, "--kubeconfig="+kubeconfig, "--image="+testenv.DefaultTestImage)
	const token = "t3-operator-token-of-at-least-32-characters"
	env := append(os.Environ(), "SANDBOXD_TOKEN="+token)

	// As shipped: refused, naming the declaration.
	cmd := exec.CommandContext(ctx, bin, daemonArgs...)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	require.Error(t, err, "the daemon starts without the NetworkPolicy declaration: %s", out)
	assert.Contains(t, string(out), "--kube-network-policy-enforced")

	node := startNodeOpts(t, sessionsNamespace, true)
	logf, err := os.Create(filepath.Join(dir, "daemon.log"))
	require.NoError(t, err)
	daemon := exec.Command(bin, append(daemonArgs, "--kube-network-policy-enforced")...)
	daemon.Env, daemon.Stdout, daemon.Stderr = env, logf, logf
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

	base := "http://127.0.0.1:" + strconv.Itoa(port)
	for deadline := time.Now().Add(2 * time.Minute); ; {
		resp, err := http.Get(base + "/healthz")
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

	run := exec.CommandContext(ctx, bin, "run", "--", "id -u; echo ran-on-kubernetes")
	run.Env = append(os.Environ(), "SANDBOXD_URL=ws://127.0.0.1:"+strconv.Itoa(port)+"/v1/ws", "SANDBOXD_TOKEN="+token)
	got, err := run.CombinedOutput()
	require.NoError(t, err, "sandboxd run: %s\ndaemon log: %s", got, logTail())
	assert.Contains(t, string(got), "1000\n")
	assert.Contains(t, string(got), "ran-on-kubernetes")
	assert.GreaterOrEqual(t, node.Exec().Counts().Kubelet, int64(1), "the session's exec went through the apiserver to the node")
	stop()
	nothingLeft(t, sessionsNamespace)
	assert.NotContains(t, logTail(), "forbidden", "the Role let the daemon do all it did")
}
