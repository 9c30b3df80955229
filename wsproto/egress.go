package wsproto

import "time"

// MethodSessionEgress lists a session's recent egress denials: the
// connections its egress proxy refused because allow_hosts does not name
// the host (decision 0050). Params SessionRef; result EgressResult.
const MethodSessionEgress = "session.egress"

// EgressResult is the result of session.egress.
type EgressResult struct {
	// Denials are the most recent (at most 64), oldest first, one per
	// host, port and way; empty when nothing was refused or the session
	// has no egress proxy (allow_hosts without names).
	Denials []EgressDenial `json:"denials"`
}

// EgressDenial is one refused host of a session.
type EgressDenial struct {
	// Time of the latest refusal.
	Time time.Time `json:"time"`
	// Host is the name or address asked for, or a description when the
	// sandbox named none ("(no SNI)").
	Host string `json:"host"`
	Port int    `json:"port"`
	// Via is how it was asked: "http" (a plain request, answered 403),
	// "connect" (CONNECT through HTTPS_PROXY, answered 403), "tls" (a TLS
	// connection without CONNECT, closed) or "limit" (past the session's
	// connection bound).
	Via string `json:"via"`
	// Reason is the text the agent got, e.g. "pypi.org is not in allow_hosts".
	Reason string `json:"reason"`
	// Count is how often the host was refused since it entered the list.
	Count int `json:"count"`
}
