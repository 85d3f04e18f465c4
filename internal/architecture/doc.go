// Package architecture holds no code: its test keeps the package table of
// docs/architecture.md true, holding every arrow of it to the imports of the code.
package architecture
