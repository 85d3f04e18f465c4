package freeport

import (
	"net"
	"testing"
)

// TestPortsAreFreeAndNeverHandedOutTwice: every port can be listened on, and no port is
// given twice, though each is closed before the next is asked for.
func TestPortsAreFreeAndNeverHandedOutTwice(t *testing.T) {
	seen := map[string]bool{}
	for range 300 {
		addr, err := Addr()
		if err != nil {
			t.Fatal(err)
		}
		if seen[addr] {
			t.Fatalf("%s handed out twice", addr)
		}
		seen[addr] = true
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("%s is not free: %v", addr, err)
		}
		_ = l.Close()
	}
}
