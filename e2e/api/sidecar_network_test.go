package api

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docker/docker/api/types/network"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/sandbox/docker"
)

// Attack M3: an HTTP sidecar dials the gateway of its session's sidecar
// network (the host's address on that internal bridge) at a port the host
// listens on at 0.0.0.0. The host firewall rejects it as it does a
// session's: the probe, run by the sidecar's own command before it execs
// the server, prints PROBE=CLOSED with the gateway it tried, the listener
// sees no connection (the learning run at serve's start probed too), and
// the rules are keyed to the session: a start re-installs them, and they
// go with the session.
func TestSidecarNetworkCannotReachHost(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	if os.Geteuid() != 0 {
		t.Skip("the host firewall needs root")
	}
	ln, err := net.Listen("tcp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	var seen atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			seen.Add(1)
			_ = c.Close()
		}
	}()
	t.Cleanup(func() { _ = ln.Close() })
	port := ln.Addr().(*net.TCPAddr).Port

	// The gateway is the subnet's first address: an internal network has
	// no default route to read it from.
	script := fmt.Sprintf(`gw=$(ip -4 route | awk '/scope link/ {split($1, a, "[./]"); print a[1] "." a[2] "." a[3] "." a[4]+1; exit}')
if nc -w 3 "$gw" %d </dev/null >/dev/null 2>&1; then echo "PROBE=OPEN gw=$gw" >&2; else echo "PROBE=CLOSED gw=$gw" >&2; fi
exec /usr/local/bin/everything -http 0.0.0.0:8080`, port)
	command, err := json.Marshal([]string{"/bin/sh", "-c", script})
	if err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(t.TempDir(), "config.yaml")
	src := fmt.Sprintf(`profiles:
  web:
    image: %s
    mcp_servers:
      - name: web
        image: %s
        command: %s
        transport: http
        port: 8080
        path: /
`, testImage, everythingImage, command)
	if err := os.WriteFile(config, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	rig := startSidecarServe(ctx, t, "--config", config)
	sess, err := rig.c.CreateSession(ctx, client.CreateOptions{Profile: "web"})
	if err != nil {
		t.Fatal(err)
	}
	if obs, err := sess.Call(ctx, "web__greet", map[string]any{"name": "m3"}, nil); err != nil || obs.IsError || !strings.Contains(obs.Text(), "m3") {
		t.Fatalf("web__greet: %v %s", err, obs.Text())
	}
	logs, err := exec.CommandContext(ctx, "docker", "logs", "sandboxd-"+sess.ID+"-mcp-web").CombinedOutput()
	if err != nil {
		t.Fatalf("docker logs: %v %s", err, logs)
	}
	m := regexp.MustCompile(`PROBE=(\w+) gw=(\S+)`).FindStringSubmatch(string(logs))
	if m == nil {
		t.Fatalf("the sidecar printed no probe; its log:\n%s", logs)
	}
	n, err := engine.NetworkInspect(ctx, "sandboxd-mcp-"+sess.ID, network.InspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(n.IPAM.Config) == 0 || n.IPAM.Config[0].Gateway != m[2] {
		t.Errorf("the probe dialled %s, not the sidecar network's gateway (%+v)", m[2], n.IPAM.Config)
	}
	if m[1] != "CLOSED" {
		t.Errorf("the HTTP sidecar reached the host's listener at %s:%d (PROBE=%s)", m[2], port, m[1])
	}
	if got := seen.Load(); got != 0 {
		t.Errorf("the host's listener saw %d connections from sidecars, want 0", got)
	}

	rules := func() string {
		out, err := exec.CommandContext(ctx, "iptables", "-w", "-S").CombinedOutput()
		if err != nil {
			t.Fatalf("iptables -S: %v %s", err, out)
		}
		var mine []string
		for line := range strings.Lines(string(out)) {
			if strings.Contains(line, ":"+sess.ID+"/") {
				mine = append(mine, line)
			}
		}
		return strings.Join(mine, "")
	}
	have := rules()
	if !strings.Contains(have, "REJECT") {
		t.Errorf("no rules for the sidecar network:\n%s", have)
	}
	// A firewall reload drops them; a runtime of the server's scope
	// starting (a restarted daemon) puts them back.
	for _, r := range docker.FirewallRules(ctx) {
		if strings.HasPrefix(r.Key, sess.ID+"/") {
			if err := r.Delete(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	rt, err := docker.New(ctx, docker.Options{AgentBinary: binary, Labels: map[string]string{labelRun: runID, labelTest: testScope(t)}, Logger: slog.Default()})
	if err != nil {
		t.Fatal(err)
	}
	rt.Close()
	if got := rules(); got != have {
		t.Errorf("after a start, the sidecar network's rules are\n%s\nwant\n%s", got, have)
	}
	if err := sess.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if r := rules(); r != "" {
		t.Errorf("firewall rules left after Close:\n%s", r)
	}
	rig.serve.stop(t)
	waitNoContainers(t, "after the sidecar network session")
}
