package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	dclient "github.com/docker/docker/client"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/sandbox"
	"github.com/sandboxd/sandboxd/server"
	"github.com/sandboxd/sandboxd/server/daemon"
)

func init() {
	register(suite{
		name: "sidecar",
		about: "an MCP sidecar's tool call (the go-sdk `everything` server's greet, streamable HTTP; make sidecar-images) through sandboxd " +
			"(WebSocket; MCP 2025-11-25) vs the same call by a go-sdk client straight to the same container; session ready with " +
			"one eager sidecar vs none (image: $SANDBOXD_TEST_IMAGE or sandboxd-test:latest)",
		run: runSidecarSuite,
	})
}

// sidecarBenchImage is the sidecar of the rows: make sidecar-images.
const sidecarBenchImage = "sandboxd-mcp-everything:latest"

// addedBelow is met when a row's p50 is less than d above its baseline's.
func addedBelow(d time.Duration) (string, func(row) bool) {
	v := strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', -1, 64)
	return "p50 < baseline + " + v + " ms", func(r row) bool { return r.s.p50-r.base.p50 < d }
}

func runSidecarSuite(ctx context.Context, e *env) (_ []row, err error) {
	su, err := e.setup()
	if err != nil {
		return nil, err
	}
	image := su.image
	cli, err := dclient.NewClientWithOpts(dclient.FromEnv, dclient.WithAPIVersionNegotiation())
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	if _, err := cli.ImageInspect(ctx, sidecarBenchImage); err != nil {
		return nil, fmt.Errorf("sidecar suite: %s (make sidecar-images): %w", sidecarBenchImage, err)
	}
	sidecar := sandbox.MCPServer{Name: "everything", Image: sidecarBenchImage, Args: []string{"-http", "0.0.0.0:8080"},
		Transport: sandbox.TransportHTTP, Port: 8080, Path: "/"}
	ip, err := startInProcess(ctx, "sidecar", su.bin, image, su.quiet, runLabels(), time.Minute, func(c *daemon.Config) {
		c.ServerHook = func(o *server.Options) {
			o.Profiles = map[string]sandbox.SessionOptions{"sc": {Image: image, MCPServers: []sandbox.MCPServer{sidecar}}}
		}
	})
	if err != nil {
		return nil, err
	}
	defer ip.stop()
	c, err := client.Dial(ctx, ip.ws, ip.token, client.Options{})
	if err != nil {
		return nil, err
	}
	defer c.Close()

	// Calls: the WebSocket session's sidecar, also called straight.
	ws, err := c.CreateSession(ctx, client.CreateOptions{Profile: "sc"})
	if err != nil {
		return nil, err
	}
	defer func() { _ = ws.Close(context.WithoutCancel(ctx)) }()
	ins, err := cli.ContainerInspect(ctx, "sandboxd-"+ws.ID+"-mcp-everything")
	if err != nil {
		return nil, err
	}
	ep := ins.NetworkSettings.Networks["sandboxd-mcp-"+ws.ID]
	if ep == nil || ep.IPAddress == "" {
		return nil, fmt.Errorf("the sidecar of %s has no address on its network", ws.ID)
	}
	mc := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil)
	direct, err := mc.Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint: "http://" + net.JoinHostPort(ep.IPAddress, "8080") + "/", MaxRetries: -1,
	}, nil)
	if err != nil {
		return nil, fmt.Errorf("connecting to the sidecar straight: %w", err)
	}
	defer direct.Close()
	legacy, err := mc.Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint:   ip.http + "/mcp/sc",
		HTTPClient: &http.Client{Transport: bearerTransport{ip.token, http.DefaultTransport}},
	}, &mcp.ClientSessionOptions{ProtocolVersion: legacyMCP})
	if err != nil {
		return nil, err
	}
	defer legacy.Close()

	greet := map[string]any{"name": "bench"}
	check := func(text string, isError bool, err error) error {
		switch {
		case err != nil:
			return err
		case isError || !strings.Contains(text, "Hi bench"):
			return fmt.Errorf("greet: %.200s", text)
		}
		return nil
	}
	mcpCall := func(cs *mcp.ClientSession, name string) func() error {
		return func() error {
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: greet})
			if err != nil {
				return err
			}
			return check(resultText(res), res.IsError, nil)
		}
	}
	n := e.n(1000)
	e.logf("direct go-sdk client -> sidecar x%d", n)
	base, err := measure(n, 50, mcpCall(direct, "greet"))
	if err != nil {
		return nil, err
	}
	e.logf("WebSocket -> sandboxd -> sidecar x%d", n)
	wsS, err := measure(n, 50, func() error {
		obs, err := ws.Call(ctx, "everything__greet", greet, nil)
		if err != nil {
			return err
		}
		return check(obs.Text(), obs.IsError, nil)
	})
	if err != nil {
		return nil, err
	}
	e.logf("MCP 2025-11-25 -> sandboxd -> sidecar x%d", n)
	mcpS, err := measure(n, 50, mcpCall(legacy, "everything__greet"))
	if err != nil {
		return nil, err
	}
	added, addedMet := addedBelow(time.Millisecond)
	const baseline = "go-sdk client straight to the sidecar"
	rows := []row{
		{scenario: "sidecar: greet, go-sdk client straight to the container (baseline)", s: base},
		{scenario: "sidecar: greet via WebSocket (everything__greet)", s: wsS, baseline: baseline, base: base, target: added, met: addedMet},
		{scenario: "sidecar: greet via MCP 2025-11-25 (everything__greet)", s: mcpS, baseline: baseline, base: base, target: added, met: addedMet},
	}
	e.logf("  greet p50: straight %s, WebSocket %s, MCP %s", ms(base.p50), ms(wsS.p50), ms(mcpS.p50))

	// Session ready, one eager sidecar vs none, alternated.
	var plain, with []time.Duration
	for i := range e.n(10) {
		for _, o := range []client.CreateOptions{{}, {Profile: "sc"}} {
			began := time.Now()
			s, err := c.CreateSession(ctx, o)
			if err != nil {
				return rows, fmt.Errorf("creating a session (profile %q; is %s built? make test-image): %w", o.Profile, image, err)
			}
			took := time.Since(began)
			if err := s.Close(ctx); err != nil {
				return rows, err
			}
			if o.Profile == "" {
				plain = append(plain, took)
			} else {
				with = append(with, took)
			}
		}
		e.logf("  ready round %d: without %s, with a sidecar %s", i, ms(plain[i]), ms(with[i]))
	}
	return append(rows,
		row{scenario: "sidecar: session ready, no sidecar (baseline)", s: sampleOfDurations(plain)},
		row{scenario: "sidecar: session ready, one eager HTTP sidecar", s: sampleOfDurations(with), baseline: "session ready, no sidecar",
			base: sampleOfDurations(plain)},
	), nil
}
