module github.com/converge-gitops/converge/sync/render/testdata/sops/generate

go 1.26.0

require github.com/getsops/sops/v3 v3.13.3
