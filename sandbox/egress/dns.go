package egress

import (
	"errors"
	"net"
	"net/netip"

	"golang.org/x/net/dns/dnsmessage"
)

// serveDNS answers the session's DNS: every name's A record is the
// session's gateway (gw), where the firewall sends ports 80 and 443 to the
// proxy, which checks each connection by name; other types get an empty
// answer. Nothing is forwarded: a lookup, allowed name or not, never leaves
// the host, so names cannot carry data out, and a client that ignores
// HTTP(S)_PROXY still reaches the proxy (and reads its 403).
func serveDNS(pc net.PacketConn, gw netip.Addr) {
	buf := make([]byte, 1500)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue // a transient error of one datagram
		}
		if out := dnsAnswer(buf[:n], gw); out != nil {
			_, _ = pc.WriteTo(out, from)
		}
	}
}

// dnsTTL is the TTL of the answers: they never change.
const dnsTTL = 60

// dnsAnswer is the reply to one query, nil for a message that is not one.
func dnsAnswer(query []byte, gw netip.Addr) []byte {
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil || h.Response {
		return nil
	}
	q, err := p.Question()
	if err != nil {
		return nil
	}
	rh := dnsmessage.Header{ID: h.ID, Response: true, OpCode: h.OpCode, RecursionDesired: h.RecursionDesired, RecursionAvailable: true}
	if h.OpCode != 0 {
		rh.RCode = dnsmessage.RCodeNotImplemented
	}
	b := dnsmessage.NewBuilder(make([]byte, 0, 512), rh)
	b.EnableCompression()
	if b.StartQuestions() != nil || b.Question(q) != nil || b.StartAnswers() != nil {
		return nil
	}
	if h.OpCode == 0 && q.Type == dnsmessage.TypeA && q.Class == dnsmessage.ClassINET && gw.Is4() {
		rr := dnsmessage.ResourceHeader{Name: q.Name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET, TTL: dnsTTL}
		if b.AResource(rr, dnsmessage.AResource{A: gw.As4()}) != nil {
			return nil
		}
	}
	out, err := b.Finish()
	if err != nil {
		return nil
	}
	return out
}
