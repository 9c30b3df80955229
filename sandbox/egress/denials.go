package egress

import (
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"
)

// Values of Denial.Via: how the sandbox asked.
const (
	ViaHTTP    = "http"    // a plain HTTP request (proxied or redirected from port 80): answered 403
	ViaConnect = "connect" // a CONNECT through HTTPS_PROXY: answered 403
	ViaTLS     = "tls"     // a TLS connection redirected from port 443: closed
	ViaLimit   = "limit"   // a connection past the session's bound: closed
)

const (
	// maxDenials is how many recent denials a session keeps.
	maxDenials = 64
	// maxLoggedNames bounds the names a session's proxy logs a denial of
	// (each once); past it, one line says that further names go unlogged.
	maxLoggedNames = 256
)

// Denial is one refused connection of a session's sandbox.
type Denial struct {
	Time time.Time `json:"time"`
	// Host is the name or address asked for (normalized), or a short
	// description when the sandbox named none ("(no SNI)").
	Host string `json:"host"`
	Port int    `json:"port"`
	Via  string `json:"via"`
	// Reason is the text the agent got (or would have, for TLS).
	Reason string `json:"reason"`
	// Count is how many times this host was refused since it entered the
	// list.
	Count int `json:"count"`
}

// denialLog is a session's bounded record of denials: the recent ones,
// one entry per host and way (a repeat counts and moves to the end), and
// the names already logged.
type denialLog struct {
	log    *slog.Logger
	now    func() time.Time
	notify func(via string)
	mu     sync.Mutex
	recent []Denial
	logged map[string]bool
	full   bool
}

func (d *denialLog) init(log *slog.Logger, now func() time.Time, notify func(string)) {
	d.log, d.now, d.notify, d.logged = log, now, notify, map[string]bool{}
}

// add records a denial, logging the host the first time.
func (d *denialLog) add(host string, port int, via, reason string) {
	if len(host) > maxName+2 {
		host = host[:maxName] + "…"
	}
	if d.notify != nil {
		d.notify(via)
	}
	d.mu.Lock()
	i := slices.IndexFunc(d.recent, func(x Denial) bool { return x.Host == host && x.Via == via && x.Port == port })
	n := 1
	if i >= 0 {
		n += d.recent[i].Count
		d.recent = slices.Delete(d.recent, i, i+1)
	}
	if len(d.recent) == maxDenials {
		d.recent = slices.Delete(d.recent, 0, 1)
	}
	d.recent = append(d.recent, Denial{Time: d.now(), Host: host, Port: port, Via: via, Reason: reason, Count: n})
	first := !d.logged[host] && !d.full
	if first {
		if len(d.logged) == maxLoggedNames {
			d.full = true
		} else {
			d.logged[host] = true
		}
	}
	full := first && d.full
	d.mu.Unlock()
	switch {
	case full:
		d.log.Warn("egress: more names denied than are logged; session.egress lists the recent ones", "logged_names", maxLoggedNames)
	case first:
		d.log.Info("egress: denied", "host", host, "port", port, "via", via, "reason", reason)
	}
}

// limit records a connection refused by the session's bound.
func (d *denialLog) limit(maxConns int) {
	d.add("(connection limit)", 0, ViaLimit, "more than "+itoa(maxConns)+" open connections through the session's egress proxy")
}

func (d *denialLog) list() []Denial {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.recent)
}

func sortDenials(ds []Denial) {
	slices.SortStableFunc(ds, func(a, b Denial) int { return a.Time.Compare(b.Time) })
}

// deny records a denial of the session.
func (ss *session) deny(host string, port int, via, reason string) {
	ss.denials.add(host, port, via, reason)
}

// denyErr records a failed dial that the policy refused (a name whose
// addresses are all out of bounds); other failures are no denial.
func (ss *session) denyErr(host string, port int, via string, err error) {
	var de *DeniedError
	if errors.As(err, &de) {
		ss.deny(host, port, via, de.Reason)
	}
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b [20]byte
	i := len(b)
	for n > 0 {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
	}
	return string(b[i:])
}
