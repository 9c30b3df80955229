package kubetest

import (
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/util/proxy"
	translator "k8s.io/apiserver/pkg/util/proxy"
	"k8s.io/client-go/rest"
	streaming "k8s.io/cri-streaming/pkg/streaming/remotecommand"
	"k8s.io/streaming/pkg/httpstream/wsstream"
)

// Executor runs a command in a container of a Pod; the kubelet's streaming
// server hands it the streams (k8s.io/cri-streaming's interface).
type Executor = streaming.Executor

// UIDFunc returns the UID of a Pod, or an error if the node runs no such
// Pod; nil means every Pod exists, with an empty UID.
type UIDFunc func(namespace, pod string) (string, error)

// ExecCounts are the exec requests an ExecServer saw at its API-server
// endpoint, by what carried them.
type ExecCounts struct {
	WebSocket int64 // v5 WebSocket requests, translated to SPDY for the kubelet endpoint
	SPDY      int64 // SPDY requests, proxied to the kubelet endpoint
	Refused   int64 // WebSocket requests refused (SetRefuseWebSocket)
	Proxied   int64 // WebSocket requests proxied untranslated to the kubelet endpoint (SetProxyWebSocket)
	Kubelet   int64 // requests the kubelet endpoint served (from either path, or a real API server)
}

// ExecServer serves pods/exec the way a cluster does, with Kubernetes' own
// code on both hops:
//
//   - a kubelet endpoint (TLS), /exec/{namespace}/{pod}/{container}, served
//     by k8s.io/cri-streaming's ServeExec (SPDY v1-v4, WebSocket up to v4);
//   - an API-server endpoint (TLS), /api/v1/namespaces/{ns}/pods/{pod}/exec,
//     which does what kube-apiserver does with such a request: a v5
//     WebSocket is translated to SPDY by k8s.io/apiserver's
//     StreamTranslatorHandler, anything else is proxied to the kubelet
//     endpoint by apimachinery's UpgradeAwareHandler.
//
// A real API server can use the kubelet endpoint directly (Kubelet,
// KubeletCA); RESTConfig points a client at the API-server endpoint.
type ExecServer struct {
	exec    Executor
	uid     UIDFunc
	kubelet *httptest.Server
	api     *httptest.Server

	refuseWS  atomic.Bool
	proxyWS   atomic.Bool
	proxied   atomic.Int64
	ws        atomic.Int64
	spdy      atomic.Int64
	refused   atomic.Int64
	kubeletN  atomic.Int64
	closeOnce sync.Once
}

// NewExecServer starts both endpoints on loopback. uid may be nil.
func NewExecServer(exec Executor, uid UIDFunc) (*ExecServer, error) {
	if exec == nil {
		return nil, errors.New("kubetest: NewExecServer needs an Executor")
	}
	s := &ExecServer{exec: exec, uid: uid}
	km := http.NewServeMux()
	km.HandleFunc("POST /exec/{namespace}/{pod}/{container}", s.serveKubelet)
	km.HandleFunc("GET /exec/{namespace}/{pod}/{container}", s.serveKubelet)
	s.kubelet = httptest.NewTLSServer(km)
	am := http.NewServeMux()
	am.HandleFunc("POST /api/v1/namespaces/{namespace}/pods/{pod}/exec", s.serveAPI)
	am.HandleFunc("GET /api/v1/namespaces/{namespace}/pods/{pod}/exec", s.serveAPI)
	s.api = httptest.NewTLSServer(am)
	return s, nil
}

// Close stops both endpoints and ends the streams they serve.
func (s *ExecServer) Close() {
	s.closeOnce.Do(func() {
		s.api.CloseClientConnections()
		s.kubelet.CloseClientConnections()
		s.api.Close()
		s.kubelet.Close()
	})
}

// SetRefuseWebSocket makes the API-server endpoint refuse WebSocket
// upgrades (400, as a proxy or an old server without the v5 translator
// might), so a client must fall back to SPDY.
func (s *ExecServer) SetRefuseWebSocket(refuse bool) { s.refuseWS.Store(refuse) }

// SetProxyWebSocket makes the API-server endpoint proxy WebSocket
// requests to the kubelet endpoint untranslated, as an API server without
// the stream translator does (before 1.30, or with the
// TranslateStreamCloseWebsocketRequests gate off): the kubelet's legacy
// WebSocket server (cri-streaming, v1 to v4) refuses a v5 request, so a
// client must fall back to SPDY. SetRefuseWebSocket takes precedence.
func (s *ExecServer) SetProxyWebSocket(proxy bool) { s.proxyWS.Store(proxy) }

// Counts reports the exec requests seen so far.
func (s *ExecServer) Counts() ExecCounts {
	return ExecCounts{WebSocket: s.ws.Load(), SPDY: s.spdy.Load(), Refused: s.refused.Load(), Proxied: s.proxied.Load(), Kubelet: s.kubeletN.Load()}
}

// RESTConfig is a client config for the API-server endpoint (its TLS CA
// included). It serves pods/exec only.
func (s *ExecServer) RESTConfig() *rest.Config {
	return &rest.Config{Host: s.api.URL, TLSClientConfig: rest.TLSClientConfig{CAData: certPEM(s.api)}}
}

// Kubelet is the URL of the kubelet endpoint (https://127.0.0.1:port).
func (s *ExecServer) Kubelet() *url.URL {
	u, _ := url.Parse(s.kubelet.URL) // httptest's own URL
	return u
}

// KubeletCA is the PEM certificate the kubelet endpoint serves with.
func (s *ExecServer) KubeletCA() []byte { return certPEM(s.kubelet) }

func certPEM(ts *httptest.Server) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ts.Certificate().Raw})
}

// serveKubelet is the kubelet's exec handler: the query carries command,
// input, output, error, tty as kube-apiserver sends them.
func (s *ExecServer) serveKubelet(w http.ResponseWriter, req *http.Request) {
	s.kubeletN.Add(1)
	ns, pod, ctr := req.PathValue("namespace"), req.PathValue("pod"), req.PathValue("container")
	opts, err := streaming.NewOptions(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	cmd := req.URL.Query()["command"]
	if len(cmd) == 0 {
		http.Error(w, "no command", http.StatusBadRequest)
		return
	}
	uid := ""
	if s.uid != nil {
		if uid, err = s.uid(ns, pod); err != nil {
			http.Error(w, err.Error(), http.StatusNotFound)
			return
		}
	}
	streaming.ServeExec(w, req, s.exec, ns+"/"+pod, uid, ctr, cmd, opts, 0,
		streaming.DefaultStreamCreationTimeout, streaming.SupportedStreamingProtocols)
}

// serveAPI is kube-apiserver's pods/exec: validate the PodExecOptions
// query, locate the kubelet endpoint, translate or proxy.
func (s *ExecServer) serveAPI(w http.ResponseWriter, req *http.Request) {
	ns, pod := req.PathValue("namespace"), req.PathValue("pod")
	q := req.URL.Query()
	flag := func(name string) (bool, error) {
		v := q.Get(name)
		if v == "" {
			return false, nil
		}
		b, err := strconv.ParseBool(v)
		if err != nil {
			return false, fmt.Errorf("%s=%q: %w", name, v, err)
		}
		return b, nil
	}
	var opts translator.Options
	var errs []error
	for _, f := range []struct {
		name string
		dst  *bool
	}{{"stdin", &opts.Stdin}, {"stdout", &opts.Stdout}, {"stderr", &opts.Stderr}, {"tty", &opts.Tty}} {
		b, err := flag(f.name)
		errs = append(errs, err)
		*f.dst = b
	}
	container, cmd := q.Get("container"), q["command"]
	if container == "" {
		errs = append(errs, errors.New("container is required (the test node does not default it)"))
	}
	if len(cmd) == 0 {
		errs = append(errs, errors.New("command is required"))
	}
	if !opts.Stdin && !opts.Stdout && !opts.Stderr {
		errs = append(errs, errors.New("at least one of stdin, stdout, stderr is required"))
	}
	if err := errors.Join(errs...); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if s.uid != nil {
		if _, err := s.uid(ns, pod); err != nil {
			http.Error(w, err.Error(), http.StatusNotFound)
			return
		}
	}

	kq := url.Values{"command": cmd}
	for name, on := range map[string]bool{"input": opts.Stdin, "output": opts.Stdout, "error": opts.Stderr, "tty": opts.Tty} {
		if on {
			kq.Set(name, "1")
		}
	}
	loc := s.Kubelet()
	loc.Path = "/exec/" + url.PathEscape(ns) + "/" + url.PathEscape(pod) + "/" + url.PathEscape(container)
	loc.RawQuery = kq.Encode()
	tr := s.kubelet.Client().Transport

	switch {
	case wsstream.IsWebSocketRequest(req) && s.refuseWS.Load():
		s.refused.Add(1)
		http.Error(w, "this test server refuses WebSocket upgrades", http.StatusBadRequest)
	case wsstream.IsWebSocketRequest(req) && s.proxyWS.Load():
		s.proxied.Add(1)
		proxy.NewUpgradeAwareHandler(loc, tr, false, true, responder{}).ServeHTTP(w, req)
	case wsstream.IsWebSocketRequestWithStreamCloseProtocol(req):
		s.ws.Add(1)
		translator.NewStreamTranslatorHandler(loc, tr, 0, opts).ServeHTTP(w, req)
	default:
		if strings.EqualFold(req.Header.Get("Upgrade"), "SPDY/3.1") {
			s.spdy.Add(1)
		}
		proxy.NewUpgradeAwareHandler(loc, tr, false, true, responder{}).ServeHTTP(w, req)
	}
}

type responder struct{}

func (responder) Error(w http.ResponseWriter, _ *http.Request, err error) {
	http.Error(w, err.Error(), http.StatusBadGateway)
}
