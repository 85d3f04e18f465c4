//go:build tools

// Package lint pins golangci-lint in a module of its own, so that its large
// dependency tree never shifts the versions the control plane is built with.
package lint

import (
	_ "github.com/golangci/golangci-lint/v2/cmd/golangci-lint"
)
