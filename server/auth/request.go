package auth

import (
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/sandboxd/sandboxd/wsproto"
)

// Bearer returns the bearer token of r: the Authorization header, else a
// "bearer.<token>" entry of Sec-WebSocket-Protocol (what browsers can send).
func Bearer(r *http.Request) string {
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, tok, ok := strings.Cut(h, " ")
		if ok && strings.EqualFold(scheme, "Bearer") {
			return strings.TrimSpace(tok)
		}
		return ""
	}
	for _, p := range subprotocols(r) {
		if tok, ok := strings.CutPrefix(p, wsproto.BearerPrefix); ok {
			return tok
		}
	}
	return ""
}

func subprotocols(r *http.Request) []string {
	var out []string
	for _, h := range r.Header.Values("Sec-WebSocket-Protocol") {
		for _, p := range strings.Split(h, ",") {
			if p = strings.TrimSpace(p); p != "" {
				out = append(out, p)
			}
		}
	}
	return out
}

// RequestPolicy is the Host and Origin check of every API request (except
// /healthz). The server applies it before routing, and the WebSocket and MCP
// handlers apply it again themselves, so that neither is open if mounted
// elsewhere. The zero value allows loopback Hosts and no browser Origin.
type RequestPolicy struct {
	Hosts   HostPolicy
	Origins OriginPolicy
}

// Check returns "" if r passes, else a metrics code (host_refused,
// origin_refused) and a message for a 403. A request over a unix socket
// skips the Host check: no browser reaches one.
func (p RequestPolicy) Check(r *http.Request) (code, msg string) {
	viaUnix := false
	if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok && a.Network() == "unix" {
		viaUnix = true
	}
	if !viaUnix && !p.Hosts.Check(r.Host) {
		return "host_refused", "Host " + r.Host + " is not allowed (see --allow-host)"
	}
	if !p.Origins.CheckRequest(r.Header.Get("Origin"), r.Host) {
		return "origin_refused", "cross-origin requests are not allowed (see --allow-origin)"
	}
	return "", ""
}

// HostPolicy accepts the Host headers of requests. Loopback names (localhost,
// 127.0.0.0/8, ::1) on any port always pass; Allowed adds names (a host
// without port) or "*" for any. A DNS-rebinding page has its own name in
// Host, so it fails here even though its Origin equals its Host.
type HostPolicy struct {
	Allowed []string
}

// Check reports whether host (a Host header, with or without port) passes.
func (p HostPolicy) Check(host string) bool {
	name := host
	if h, _, err := net.SplitHostPort(host); err == nil {
		name = h
	}
	name = strings.TrimSuffix(strings.Trim(name, "[]"), ".")
	if IsLoopbackName(name) {
		return true
	}
	for _, a := range p.Allowed {
		if a == "*" || strings.EqualFold(a, name) {
			return true
		}
	}
	return false
}

// IsLoopbackName reports whether a host name (no port) is loopback.
func IsLoopbackName(name string) bool {
	if strings.EqualFold(name, "localhost") {
		return true
	}
	ip := net.ParseIP(name)
	return ip != nil && ip.IsLoopback()
}

// OriginPolicy accepts the Origin header of requests. A request without
// Origin is not from a browser and passes (it still needs the token), as
// does a same-origin one (see CheckRequest). Any other Origin must be
// listed exactly (scheme://host[:port]) or "*".
type OriginPolicy struct {
	Allowed []string
}

// CheckRequest reports whether a request with this Origin (possibly empty)
// and Host header passes: Check, or the Origin's host:port equal to the Host
// (the check gorilla/websocket applies by default). Clients such as
// Python's websocket-client send "Origin: http://<host>:<port>" of the
// server they dial. A DNS-rebinding page also sends its own origin as Host,
// but its name fails the Host check (HostPolicy) before this one matters,
// and a same-origin request still needs the token.
func (p OriginPolicy) CheckRequest(origin, host string) bool {
	if origin != "" && host != "" {
		if u, err := url.Parse(origin); err == nil && u.Host != "" && (u.Scheme == "http" || u.Scheme == "https") &&
			strings.EqualFold(u.Host, host) {
			return true
		}
	}
	return p.Check(origin)
}

// Check reports whether origin (possibly empty) is listed (or absent).
func (p OriginPolicy) Check(origin string) bool {
	if origin == "" {
		return true
	}
	u, err := url.Parse(origin)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return false
	}
	norm := strings.ToLower(u.Scheme + "://" + u.Host)
	for _, a := range p.Allowed {
		if a == "*" || strings.EqualFold(strings.TrimSuffix(a, "/"), norm) {
			return true
		}
	}
	return false
}
