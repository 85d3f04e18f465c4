package faultproxy

import (
	"bufio"
	"io"
	"net"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// echoServer answers each line with the same line, until the client closes.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer func() { _ = c.Close() }()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

func start(t *testing.T) *Proxy {
	t.Helper()
	p, err := Listen("127.0.0.1:0", echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// client is one connection through the proxy.
type client struct {
	c net.Conn
	r *bufio.Reader
}

func dial(t *testing.T, addr string) (*client, error) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { _ = c.Close() })
	return &client{c: c, r: bufio.NewReader(c)}, nil
}

// echoed dials addr and checks that a line comes back through the connection.
func echoed(g Gomega, t *testing.T, addr, line string) *client {
	t.Helper()
	c, err := dial(t, addr)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(c.roundTrip(line, 5*time.Second)).To(Equal(line + "\n"))
	return c
}

// roundTrip sends a line and reads its echo, or fails after wait.
func (c *client) roundTrip(line string, wait time.Duration) (string, error) {
	_ = c.c.SetDeadline(time.Now().Add(wait))
	if _, err := io.WriteString(c.c, line+"\n"); err != nil {
		return "", err
	}
	got, err := c.r.ReadString('\n')
	return got, err
}

func TestForwardsBothWays(t *testing.T) {
	g := NewWithT(t)
	p := start(t)
	echoed(g, t, p.Addr(), "hello")
	// The echo may reach the client before the proxy has counted it.
	g.Eventually(func() []int64 {
		conns, bytes := p.Stats()
		return []int64{conns, bytes}
	}).Should(Equal([]int64{1, 12}), "one connection, 6 bytes each way")
}

// TestDownRefusesAndCutsThenUpServesOnTheSameAddress: down, an open connection is cut and a
// new one refused; up again, the same address serves.
func TestDownRefusesAndCutsThenUpServesOnTheSameAddress(t *testing.T) {
	g := NewWithT(t)
	p := start(t)
	addr := p.Addr()
	c := echoed(g, t, addr, "one")

	p.Down()
	_, err := c.roundTrip("two", 5*time.Second)
	g.Expect(err).To(HaveOccurred(), "the open connection was cut")
	_, err = dial(t, addr)
	g.Expect(err).To(MatchError(ContainSubstring("connection refused")))

	g.Expect(p.Up()).To(Succeed())
	g.Expect(p.Addr()).To(Equal(addr))
	echoed(g, t, addr, "three")
}

func TestCutKeepsListening(t *testing.T) {
	g := NewWithT(t)
	p := start(t)
	c := echoed(g, t, p.Addr(), "one")
	p.Cut()
	_, err := c.roundTrip("two", 5*time.Second)
	g.Expect(err).To(HaveOccurred())
	echoed(g, t, p.Addr(), "three")
}

// TestPartitionHoldsBytesUntilHealed: during a partition an open connection and a new one
// both stall, nothing is lost, and both answer once it heals.
func TestPartitionHoldsBytesUntilHealed(t *testing.T) {
	g := NewWithT(t)
	p := start(t)
	open := echoed(g, t, p.Addr(), "before")

	p.Partition()
	_, err := open.roundTrip("during", 300*time.Millisecond)
	g.Expect(err).To(MatchError(ContainSubstring("timeout")), "the open connection stalls")
	fresh, err := dial(t, p.Addr())
	g.Expect(err).NotTo(HaveOccurred(), "a new connection is accepted")
	_, err = fresh.roundTrip("new", 300*time.Millisecond)
	g.Expect(err).To(MatchError(ContainSubstring("timeout")), "and stalls too")

	p.Heal()
	_ = open.c.SetDeadline(time.Now().Add(5 * time.Second))
	g.Expect(open.r.ReadString('\n')).To(Equal("during\n"), "what was held arrives")
	_ = fresh.c.SetDeadline(time.Now().Add(5 * time.Second))
	g.Expect(fresh.r.ReadString('\n')).To(Equal("new\n"))
	g.Expect(open.roundTrip("after", 5*time.Second)).To(Equal("after\n"))
}

// TestDelayHoldsEachChunk: with a delay, a round trip takes at least the delay each way;
// without, it is back at once.
func TestDelayHoldsEachChunk(t *testing.T) {
	g := NewWithT(t)
	p := start(t)
	c, err := dial(t, p.Addr())
	g.Expect(err).NotTo(HaveOccurred())
	p.Delay(150 * time.Millisecond)
	began := time.Now()
	g.Expect(c.roundTrip("slow", 5*time.Second)).To(Equal("slow\n"))
	g.Expect(time.Since(began)).To(BeNumerically(">=", 300*time.Millisecond))
	p.Delay(0)
	g.Expect(c.roundTrip("fast", 5*time.Second)).To(Equal("fast\n"))
}

// TestCloseEndsPartitionedConnections: Close returns though connections were held by a
// partition.
func TestCloseEndsPartitionedConnections(t *testing.T) {
	g := NewWithT(t)
	p, err := Listen("127.0.0.1:0", echoServer(t))
	g.Expect(err).NotTo(HaveOccurred())
	c, err := dial(t, p.Addr())
	g.Expect(err).NotTo(HaveOccurred())
	p.Partition()
	_, err = c.roundTrip("held", 200*time.Millisecond)
	g.Expect(err).To(HaveOccurred())
	closed := make(chan struct{})
	go func() { p.Close(); close(closed) }()
	g.Eventually(closed, 5*time.Second).Should(BeClosed())
	g.Expect(p.Up()).To(MatchError(ContainSubstring("closed")))
}
