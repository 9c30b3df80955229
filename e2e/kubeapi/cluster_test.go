package kubeapi

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	kclient "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// cluster is a control plane without nodes: Debian's etcd and a
// kube-apiserver built from k8s.io/kubernetes (make kube-apiserver), both
// on loopback, with a static admin token, RBAC, and the default admission
// plugins (PodSecurity and ServiceAccount among them). There is no
// controller-manager and no scheduler: tests create the default
// ServiceAccount of their namespaces and bind Pods to nodes themselves.
type cluster struct {
	dir        string
	etcd       *process
	apiserver  *process
	host       string // https://127.0.0.1:PORT
	caFile     string // the apiserver's self-signed serving certificate
	kubeconfig string // admin kubeconfig file, for kubectl
	admin      *rest.Config
	client     kclient.Interface
}

// adminToken authenticates as a member of system:masters (token file).
const adminToken = "sandboxd-t3-admin-token"

// process is a child process whose output goes to a log file and whose end
// is awaited once.
type process struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error
}

func startProcess(name, logPath, bin string, args ...string) (*process, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group, so a signal to the test binary's group (^C)
	// does not stop it before stop() does.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	return p, nil
}

// exited reports whether the process ended, and how.
func (p *process) exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// stop ends the process: SIGTERM, then SIGKILL after 15 s.
func (p *process) stop() {
	if p == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// tail is the end of the process's log, for errors.
func (p *process) tail() string {
	b, _ := os.ReadFile(p.log)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-30):], "\n")
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// startCluster starts etcd and kube-apiserver in dir (etcd's data in
// dataDir) and waits until the apiserver is ready.
func startCluster(ctx context.Context, dir, dataDir, apiserverBin, etcdBin string) (c *cluster, err error) {
	c = &cluster{dir: dir}
	defer func() {
		if err != nil {
			c.stop()
		}
	}()
	ports := make([]int, 3)
	for i := range ports {
		if ports[i], err = freePort(); err != nil {
			return nil, err
		}
	}
	etcdClient := "http://127.0.0.1:" + strconv.Itoa(ports[0])
	etcdPeer := "http://127.0.0.1:" + strconv.Itoa(ports[1])
	c.etcd, err = startProcess("etcd", filepath.Join(dir, "etcd.log"), etcdBin,
		"--name", "t3", "--data-dir", dataDir,
		"--listen-client-urls", etcdClient, "--advertise-client-urls", etcdClient,
		"--listen-peer-urls", etcdPeer, "--initial-advertise-peer-urls", etcdPeer,
		"--initial-cluster", "t3="+etcdPeer, "--logger", "zap", "--log-level", "warn")
	if err != nil {
		return nil, err
	}

	// The ServiceAccount token signer: without it TokenRequest (a token for
	// the daemon's ServiceAccount) is off.
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	saKey := filepath.Join(dir, "sa.key")
	if err := os.WriteFile(saKey, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		return nil, err
	}
	tokens := filepath.Join(dir, "tokens.csv")
	if err := os.WriteFile(tokens, []byte(adminToken+`,t3-admin,t3-admin,"system:masters"`+"\n"), 0o600); err != nil {
		return nil, err
	}
	certDir := filepath.Join(dir, "certs")
	c.host = "https://127.0.0.1:" + strconv.Itoa(ports[2])
	c.caFile = filepath.Join(certDir, "apiserver.crt")
	c.apiserver, err = startProcess("kube-apiserver", filepath.Join(dir, "kube-apiserver.log"), apiserverBin,
		"--etcd-servers", etcdClient,
		"--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1",
		// The reconciler of the kubernetes Service's endpoints refuses a
		// loopback address; nothing here reaches the apiserver through it.
		"--endpoint-reconciler-type", "none",
		"--secure-port", strconv.Itoa(ports[2]), "--cert-dir", certDir,
		"--token-auth-file", tokens,
		"--authorization-mode", "RBAC",
		"--enable-admission-plugins", "PodSecurity",
		"--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file", saKey, "--service-account-signing-key-file", saKey,
		"--service-cluster-ip-range", "10.96.0.0/24",
		// The test node's kubelet endpoint serves a certificate of its own:
		// no kubelet CA is given, so the apiserver does not verify it.
		"--kubelet-preferred-address-types", "InternalIP",
		"--profiling=false")
	if err != nil {
		return nil, err
	}
	c.admin = &rest.Config{
		Host: c.host, BearerToken: adminToken,
		TLSClientConfig: rest.TLSClientConfig{CAFile: c.caFile},
		QPS:             200, Burst: 400,
	}
	if err := c.waitReady(ctx); err != nil {
		return nil, err
	}
	c.kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := c.writeKubeconfig(c.kubeconfig, "t3-admin", adminToken); err != nil {
		return nil, err
	}
	return c, nil
}

// waitReady polls /readyz until it answers ok, the context ends, or a
// process exits.
func (c *cluster) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	var last error
	for {
		for _, p := range []*process{c.etcd, c.apiserver} {
			if done, err := p.exited(); done {
				return fmt.Errorf("%s exited before the apiserver was ready (%v); its log ends:\n%s", p.name, err, p.tail())
			}
		}
		// The serving certificate appears once the apiserver generated it;
		// the client reads it when made.
		if _, err := os.Stat(c.caFile); err == nil && c.client == nil {
			if c.client, err = kclient.NewForConfig(c.admin); err != nil {
				return err
			}
		}
		if c.client != nil {
			last = c.readyz(ctx)
			if last == nil {
				return nil
			}
		} else {
			last = fmt.Errorf("no serving certificate yet at %s", c.caFile)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kube-apiserver not ready: %v; its log ends:\n%s", last, c.apiserver.tail())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func (c *cluster) readyz(ctx context.Context) error {
	body, err := c.client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
	if err != nil {
		return fmt.Errorf("%v: %s", err, body)
	}
	if !bytes.Equal(bytes.TrimSpace(body), []byte("ok")) {
		return fmt.Errorf("readyz: %s", body)
	}
	return nil
}

// writeKubeconfig writes a kubeconfig for user with token.
func (c *cluster) writeKubeconfig(path, user, token string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["t3"] = &clientcmdapi.Cluster{Server: c.host, CertificateAuthority: c.caFile}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["t3"] = &clientcmdapi.Context{Cluster: "t3", AuthInfo: user}
	cfg.CurrentContext = "t3"
	return clientcmd.WriteToFile(*cfg, path)
}

// stop ends the apiserver, then etcd.
func (c *cluster) stop() {
	if c == nil {
		return
	}
	c.apiserver.stop()
	c.etcd.stop()
}
