// Package faultproxy is a TCP proxy on loopback that puts a network's faults between a
// client and its server: taken down (connections refused, open ones cut) and brought back
// on the same address, open connections cut, every chunk delayed, or a partition (bytes
// held, in both directions, until it heals, as TCP holds them across dropped packets).
// The e2e suite and the soak put it in front of git servers, chart repositories and the
// API server.
package faultproxy

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy forwards the TCP connections it accepts on Addr to its backend. Safe for
// concurrent use.
type Proxy struct {
	addr    string
	backend string

	mu        sync.Mutex
	ln        net.Listener
	conns     map[net.Conn]struct{}
	delay     time.Duration
	healed    chan struct{} // closed while no partition holds
	closed    bool
	wg        sync.WaitGroup
	accepted  atomic.Int64
	forwarded atomic.Int64
}

// Listen starts a proxy on addr (host:port; port 0 picks one, kept by Down and Up) to
// backend.
func Listen(addr, backend string) (*Proxy, error) {
	healed := make(chan struct{})
	close(healed)
	p := &Proxy{addr: addr, backend: backend, conns: map[net.Conn]struct{}{}, healed: healed}
	if err := p.Up(); err != nil {
		return nil, err
	}
	return p, nil
}

// Addr is the address clients dial.
func (p *Proxy) Addr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.addr
}

// Up listens again on the proxy's address; it is a no-op while the proxy is up.
func (p *Proxy) Up() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errors.New("faultproxy: closed")
	}
	if p.ln != nil {
		return nil
	}
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		return err
	}
	p.ln, p.addr = ln, ln.Addr().String()
	p.wg.Add(1)
	go p.accept(ln)
	return nil
}

// Down closes the listener, so that connections are refused, and cuts every open one.
func (p *Proxy) Down() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		_ = p.ln.Close()
		p.ln = nil
	}
	p.cutLocked()
}

// Cut closes every open connection; new ones are accepted as before.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cutLocked()
}

func (p *Proxy) cutLocked() {
	for c := range p.conns {
		_ = c.Close()
	}
}

// Delay holds every chunk read from either side d before forwarding it (0: none).
func (p *Proxy) Delay(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.delay = d
}

// Partition holds, from now until Heal, every byte either side sends and every new
// connection's dial of the backend; connections stay open.
func (p *Proxy) Partition() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.healed:
		p.healed = make(chan struct{})
	default:
	}
}

// Heal ends a partition: what was held is forwarded.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.healed:
	default:
		close(p.healed)
	}
}

// Stats says how many connections the proxy accepted and how many bytes it forwarded.
func (p *Proxy) Stats() (connections, bytes int64) {
	return p.accepted.Load(), p.forwarded.Load()
}

// Close takes the proxy down for good, heals any partition and waits for its goroutines.
func (p *Proxy) Close() {
	p.Down()
	p.Heal()
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *Proxy) accept(ln net.Listener) {
	defer p.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		p.accepted.Add(1)
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.serve(c)
		}()
	}
}

// gate is what a forward waits for: the end of any partition, and the delay.
func (p *Proxy) gate() (<-chan struct{}, time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.healed, p.delay
}

// pass waits for the gate; it says false when the connection was cut meanwhile.
func (p *Proxy) pass(c net.Conn) bool {
	healed, delay := p.gate()
	<-healed
	if delay > 0 {
		time.Sleep(delay)
	}
	return p.tracked(c)
}

func (p *Proxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln == nil {
		return false
	}
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return true
}

func (p *Proxy) tracked(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.conns[c]
	return ok
}

func (p *Proxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		delete(p.conns, c)
		_ = c.Close()
	}
}

func (p *Proxy) serve(client net.Conn) {
	if !p.track(client) || !p.pass(client) {
		p.untrack(client)
		return
	}
	backend, err := net.Dial("tcp", p.backend)
	if err != nil {
		p.untrack(client)
		return
	}
	if !p.track(backend) {
		p.untrack(client, backend)
		return
	}
	defer p.untrack(client, backend)
	var both sync.WaitGroup
	both.Go(func() { p.forward(backend, client) })
	both.Go(func() { p.forward(client, backend) })
	both.Wait()
}

// forward copies from src to dst chunk by chunk, each through the gate.
func (p *Proxy) forward(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.pass(src) {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
			p.forwarded.Add(int64(n))
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				if tc, ok := dst.(*net.TCPConn); ok {
					_ = tc.CloseWrite()
					return
				}
			}
			_ = dst.Close()
			return
		}
	}
}
