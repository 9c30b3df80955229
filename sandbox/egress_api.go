package sandbox

import "github.com/sandboxd/sandboxd/sandbox/egress"

// EgressRuntime is a Runtime that runs egress proxies for bridge sessions
// whose allow_hosts name hosts (the Docker runtime; decision 0050).
type EgressRuntime interface {
	// EgressDenials lists a session's recent denials (its sidecars'
	// included), oldest first.
	EgressDenials(sessionID string) []egress.Denial
	// EgressDenialCounts counts every denial since the runtime started,
	// by egress.Denial.Via.
	EgressDenialCounts() map[string]uint64
}

// EgressDenials lists the session's recent egress denials, oldest first:
// none when its runtime runs no egress proxy.
func (s *Session) EgressDenials() []egress.Denial {
	if er, ok := s.m.rt.(EgressRuntime); ok {
		return er.EgressDenials(s.id)
	}
	return nil
}

// EgressDenialCounts counts the runtime's egress denials by way (nil
// when it runs no egress proxy).
func (m *Manager) EgressDenialCounts() map[string]uint64 {
	if er, ok := m.rt.(EgressRuntime); ok {
		return er.EgressDenialCounts()
	}
	return nil
}
