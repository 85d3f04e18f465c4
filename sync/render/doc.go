// Package render turns the path of a SyncTarget inside a Git checkout into the
// objects to apply: a kustomization is built with kustomize (krusty), any other
// directory has its YAML and JSON manifests read; then spec.postBuild variables are
// substituted in string values, a plain scalar typed as Flux types it (substitute.go),
// the target namespace and the owner
// labels set, the objects validated, sorted, and digested.
//
// Everything here treats the repository as hostile. All reads go through a file
// system confined to the checkout root (no `..`, absolute path or symlink leaves
// it), capped in file size, total bytes, file and document count, nesting depth and
// YAML alias expansion. Kustomize gets no remote bases or files, no plugins, KRM
// functions, helm or exec, and no custom OpenAPI schema; nothing it is handed
// names a URL, so a render never reaches the network or runs git (kustomize.go
// explains how). Every render has a deadline. A failure is an *Error naming the
// file and document, never quoting a document's content.
//
// SOPS-encrypted files (age or OpenPGP) are decrypted in memory as they are read,
// with the keys of Options.Decryption (sops.go), so kustomize sees plaintext and no
// decrypted byte is written; an encrypted file without keys fails the render.
//
// Render reads the shared, read-only checkout in place: no copy or unpack per call,
// and kustomize's OpenAPI schema is parsed once per process.
//
// What a template does cannot all be bounded inside Helm's engine (a recursion through
// tpl, output built by include, a loop calling no function), so the daemon and the CLI
// never call Render in their own process: a Pool runs it in worker processes of the same
// executable (pool.go, workerproc.go, worker.go; the protocol in wire.go), each bounded in
// resident memory, stack depth, address space, cores and time and killed past them, a share
// of the workers per tenant. A killed or crashed worker is an *Error of class
// ErrRenderWorker (or ErrRenderTimeout) for that render alone.
package render
