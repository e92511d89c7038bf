package dnsq

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// serve answers one TCP query on a loopback listener the way answer says.
func serve(t *testing.T, answer func(q dnsmessage.Message) dnsmessage.Message) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		var l [2]byte
		if _, err := io.ReadFull(c, l[:]); err != nil {
			return
		}
		b := make([]byte, binary.BigEndian.Uint16(l[:]))
		io.ReadFull(c, b)
		var q dnsmessage.Message
		if q.Unpack(b) != nil {
			return
		}
		r := answer(q)
		out, _ := r.AppendPack(make([]byte, 2, 512))
		binary.BigEndian.PutUint16(out, uint16(len(out)-2))
		c.Write(out)
	}()
	return ln.Addr().String()
}

func ask(t *testing.T, addr, name string) ([]string, error) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	as, err := A(ctx, c, name)
	var s []string
	for _, a := range as {
		s = append(s, a.String())
	}
	return s, err
}

func TestA(t *testing.T) {
	addr := serve(t, func(q dnsmessage.Message) dnsmessage.Message {
		r := dnsmessage.Message{Header: dnsmessage.Header{ID: q.ID, Response: true}, Questions: q.Questions}
		r.Answers = []dnsmessage.Resource{{Header: dnsmessage.ResourceHeader{Name: q.Questions[0].Name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET, TTL: 5},
			Body: &dnsmessage.AResource{A: [4]byte{10, 32, 0, 1}}}}
		if q.Questions[0].Name.String() != "kubernetes.default.svc.cluster.local." {
			r.Answers = nil
			r.RCode = dnsmessage.RCodeNameError
		}
		return r
	})
	got, err := ask(t, addr, "kubernetes.default.svc.cluster.local")
	if err != nil || len(got) != 1 || got[0] != "10.32.0.1" {
		t.Fatalf("A: %v %v", got, err)
	}
	addr = serve(t, func(q dnsmessage.Message) dnsmessage.Message {
		return dnsmessage.Message{Header: dnsmessage.Header{ID: q.ID, Response: true, RCode: dnsmessage.RCodeNameError}, Questions: q.Questions}
	})
	_, err = ask(t, addr, "nope.cluster.local.")
	var re *RcodeError
	if !errors.As(err, &re) || err.Error() != "nope.cluster.local.: NXDOMAIN (no such name)" {
		t.Fatalf("NXDOMAIN: %v", err)
	}
}

// A server that never answers: the context ends the query.
func TestATimeout(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			time.Sleep(2 * time.Second)
			c.Close()
		}
	}()
	c, _ := net.Dial("tcp", ln.Addr().String())
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := A(ctx, c, "x.local"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("want a deadline error, got %v", err)
	}
}
