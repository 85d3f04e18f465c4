package e2e

import (
	"io"
	"net"
	"sync"
	"testing"
)

// proxy forwards TCP connections from a fixed loopback address to a backend, and can be
// taken down (connections refused, open ones cut) and brought back on the same address:
// a git server that goes away and returns.
type proxy struct {
	addr    string
	backend string

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

func newProxy(t *testing.T, backend string) *proxy {
	t.Helper()
	p := &proxy{addr: freeAddr(t), backend: backend, conns: map[net.Conn]struct{}{}}
	if err := p.up(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.down(); p.wg.Wait() })
	return p
}

// up listens again on the proxy's address.
func (p *proxy) up() error {
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		return err
	}
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				p.serve(c)
			}()
		}
	}()
	return nil
}

// down closes the listener and every open connection.
func (p *proxy) down() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		_ = p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		_ = c.Close()
	}
}

func (p *proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln == nil {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *proxy) untrack(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.conns, c)
}

func (p *proxy) serve(client net.Conn) {
	defer func() { _ = client.Close() }()
	backend, err := net.Dial("tcp", p.backend)
	if err != nil {
		return
	}
	defer func() { _ = backend.Close() }()
	if !p.track(client) || !p.track(backend) {
		return
	}
	defer p.untrack(client)
	defer p.untrack(backend)
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(backend, client); done <- struct{}{} }()
	go func() { _, _ = io.Copy(client, backend); done <- struct{}{} }()
	<-done
}
