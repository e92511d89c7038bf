// Package dnsq asks one DNS server for a name's IPv4 addresses over a stream
// connection (DNS over TCP, RFC 1035 4.2.2). The connection may be anything
// that carries bytes — hardway opens it from a worker's side through SSH —
// so a check reaches exactly the server it names, with no local resolver,
// search list or /etc/hosts in between.
package dnsq

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// RcodeError is an answer that is not NOERROR (NXDOMAIN, SERVFAIL...).
type RcodeError struct {
	Name  string
	Rcode dnsmessage.RCode
}

func (e *RcodeError) Error() string {
	return fmt.Sprintf("%s: %s", e.Name, rcodeName(e.Rcode))
}

func rcodeName(r dnsmessage.RCode) string {
	switch r {
	case dnsmessage.RCodeNameError:
		return "NXDOMAIN (no such name)"
	case dnsmessage.RCodeServerFailure:
		return "SERVFAIL"
	case dnsmessage.RCodeRefused:
		return "REFUSED"
	}
	return r.String()
}

// A sends one A query for name (absolute; a trailing dot is added) over conn
// and returns the addresses of the answer. conn is closed when ctx ends.
func A(ctx context.Context, conn net.Conn, name string) ([]netip.Addr, error) {
	if name == "" || name[len(name)-1] != '.' {
		name += "."
	}
	n, err := dnsmessage.NewName(name)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	id := uint16(time.Now().UnixNano())
	q := dnsmessage.Message{Header: dnsmessage.Header{ID: id, RecursionDesired: true},
		Questions: []dnsmessage.Question{{Name: n, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET}}}
	b, err := q.AppendPack(make([]byte, 2, 514))
	if err != nil {
		return nil, err
	}
	binary.BigEndian.PutUint16(b, uint16(len(b)-2))

	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	if d, ok := ctx.Deadline(); ok {
		conn.SetDeadline(d)
	}
	if _, err := conn.Write(b); err != nil {
		return nil, ctxErr(ctx, fmt.Errorf("send the query: %w", err))
	}
	var l [2]byte
	if _, err := io.ReadFull(conn, l[:]); err != nil {
		return nil, ctxErr(ctx, fmt.Errorf("read the answer: %w", err))
	}
	resp := make([]byte, binary.BigEndian.Uint16(l[:]))
	if _, err := io.ReadFull(conn, resp); err != nil {
		return nil, ctxErr(ctx, fmt.Errorf("read the answer: %w", err))
	}
	var m dnsmessage.Message
	if err := m.Unpack(resp); err != nil {
		return nil, fmt.Errorf("a malformed answer: %w", err)
	}
	if m.ID != id {
		return nil, errors.New("an answer to another query")
	}
	if m.RCode != dnsmessage.RCodeSuccess {
		return nil, &RcodeError{Name: name, Rcode: m.RCode}
	}
	var out []netip.Addr
	for _, a := range m.Answers {
		if r, ok := a.Body.(*dnsmessage.AResource); ok {
			out = append(out, netip.AddrFrom4(r.A))
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no A record in the answer", name)
	}
	return out, nil
}

// ctxErr names the context's end as the cause. The connection's deadline is
// the context's, so a read can time out a moment before the context's own
// timer marks it done: an i/o timeout past the deadline is that same end.
func ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%w (%w)", ctx.Err(), err)
	}
	if d, ok := ctx.Deadline(); ok && errors.Is(err, os.ErrDeadlineExceeded) && !time.Now().Before(d) {
		return fmt.Errorf("%w (%w)", context.DeadlineExceeded, err)
	}
	return err
}
