// Package freeport hands out loopback ports to the processes that start servers on them
// for tests and benchmarks (daemons given --metrics-bind-address and the like).
package freeport

import (
	"errors"
	"fmt"
	"net"
	"sync"
)

// handedOut holds the ports Port gave in this process.
var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// Port returns a loopback port free right now and not handed out before in this process:
// the kernel may give a port closed a moment ago again, and a daemon given one port for two
// of its addresses exits.
func Port() (int, error) {
	handedOut.Lock()
	defer handedOut.Unlock()
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		if !handedOut.ports[port] {
			handedOut.ports[port] = true
			return port, nil
		}
	}
	return 0, errors.New("no free loopback port not handed out before")
}

// Addr is Port as an address, 127.0.0.1:port.
func Addr() (string, error) {
	port, err := Port()
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("127.0.0.1:%d", port), nil
}
