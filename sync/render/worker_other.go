//go:build !linux

package render

import "syscall"

// Elsewhere than Linux a worker's memory is bounded by its Go memory limit only, and its
// resident size is not watched.
func limitAddressSpace(int64) {}

func raiseOOMScore() {}

func workerProcAttr() *syscall.SysProcAttr { return nil }

func residentBytes(int) int64 { return 0 }
