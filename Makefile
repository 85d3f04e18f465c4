# converge — see README.md. `make help` lists the targets.
SHELL := bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

ROOT      := $(CURDIR)
BIN       := $(ROOT)/bin
K8S_BIN   := $(BIN)/k8s
TOOLS_BIN := $(BIN)/tools
CONTROLLER_GEN := $(TOOLS_BIN)/controller-gen
GOLANGCI_LINT  := $(TOOLS_BIN)/golangci-lint

# Tests find the control-plane binaries here (envtest's convention).
export KUBEBUILDER_ASSETS := $(K8S_BIN)

TEST_FLAGS ?= -timeout 30m
# The packages whose tests take minutes, named first so that go test starts them first
# (it runs packages in the order given, two at a time on two cores) rather than
# alphabetically, which left the longest one to run alone at the end.
SLOW_PACKAGES = ./bench ./sync/reconciler ./cmd/converge ./e2e
GEN_PATHS  := ./api/...

# What `make build` and `make image` stamp into the binary (`converge version`): the
# version from git, the commit, and as build date the commit time (not now), so that one
# commit always builds the same bytes. Each may be set: make image VERSION=v1.2.3.
VERSION           ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
VERSION           := $(VERSION)
COMMIT            ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
COMMIT            := $(COMMIT)
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
SOURCE_DATE_EPOCH := $(SOURCE_DATE_EPOCH)
BUILD_DATE        := $(shell date -u -d @$(SOURCE_DATE_EPOCH) +%Y-%m-%dT%H:%M:%SZ 2>/dev/null || date -u -r $(SOURCE_DATE_EPOCH) +%Y-%m-%dT%H:%M:%SZ)
# After `make image PUSH=1` of this version, `make build` pins `converge install` to the
# pushed digest (bin/image/pushed: name:tag@sha256:…, used when its tag is this version's).
INSTALL_IMAGE     ?= $(shell f='$(BIN)/image/pushed'; t=$$(printf %s '$(VERSION)' | tr -c 'A-Za-z0-9_.-' '-'); \
                       [ -f "$$f" ] && r=$$(cat "$$f") && case "$${r%@*}" in (*:"$$t") echo "$$r";; esac)
LDFLAGS := -X main.version=$(VERSION) -X main.commit=$(COMMIT) -X main.date=$(BUILD_DATE) \
           $(if $(INSTALL_IMAGE),-X main.installImage=$(INSTALL_IMAGE))

# make image: where to (IMAGE=name or name:tag; without a tag the version is the tag),
# for which platforms, and PUSH=1 to push.
IMAGE     ?= ghcr.io/converge-gitops/converge
PLATFORMS ?= linux/amd64,linux/arm64
PUSH      ?=

##@ General

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"; printf "Usage: make \033[36m<target>\033[0m\n"} \
	  /^[a-zA-Z_0-9-]+:.*?##/ { printf "  \033[36m%-14s\033[0m %s\n", $$1, $$2 } \
	  /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) }' $(MAKEFILE_LIST)

##@ Development

.PHONY: build
build: ## Build the converge binary into bin/converge, its version stamped.
	go build -ldflags '$(LDFLAGS)' -o $(BIN)/converge ./cmd/converge

.PHONY: image
image: ## Build the daemon's OCI image into bin/image without Docker (IMAGE, PLATFORMS, PUSH=1).
	cd tools/image && go run . -root '$(ROOT)' -out '$(BIN)/image' -image '$(IMAGE)' -platforms '$(PLATFORMS)' \
	  -version '$(VERSION)' -revision '$(COMMIT)' -source-date-epoch '$(SOURCE_DATE_EPOCH)' \
	  $(if $(filter 1 true yes,$(PUSH)),-push)

.PHONY: generate
generate: $(CONTROLLER_GEN) ## Generate deepcopy code and the CRD manifests from api/.
	$(CONTROLLER_GEN) object:headerFile=hack/boilerplate.go.txt paths="$(GEN_PATHS)"
	$(CONTROLLER_GEN) crd paths="$(GEN_PATHS)" output:crd:artifacts:config=config/crd/bases

.PHONY: verify
verify: $(CONTROLLER_GEN) ## Fail when generated files or go.mod/go.sum differ from a fresh generation.
	@tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	cp api/v1alpha1/zz_generated.deepcopy.go "$$tmp/"; cp -r config/crd/bases "$$tmp/bases"; \
	$(MAKE) -s generate >/dev/null; \
	stale=0; \
	diff -u "$$tmp/zz_generated.deepcopy.go" api/v1alpha1/zz_generated.deepcopy.go || stale=1; \
	diff -ru "$$tmp/bases" config/crd/bases || stale=1; \
	if [ $$stale = 1 ]; then \
	  cp "$$tmp/zz_generated.deepcopy.go" api/v1alpha1/; rm -rf config/crd/bases; cp -r "$$tmp/bases" config/crd/bases; \
	  echo "generated files are stale (diff above): run 'make generate'"; exit 1; \
	fi
	go mod tidy -diff || { echo "go.mod/go.sum are not tidy, run 'go mod tidy'"; exit 1; }
	cd tools && go mod tidy -diff || { echo "tools/go.mod is not tidy"; exit 1; }
	cd tools/lint && go mod tidy -diff || { echo "tools/lint/go.mod is not tidy"; exit 1; }
	cd tools/image && go mod tidy -diff || { echo "tools/image/go.mod is not tidy"; exit 1; }
	@echo "generated files and go.mod are up to date"

.PHONY: lint
lint: $(GOLANGCI_LINT) ## gofmt, go vet and golangci-lint.
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './bin/*')); \
	  if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	go vet ./...
	cd tools/image && go vet ./...
	$(GOLANGCI_LINT) run ./...

.PHONY: controlplane
controlplane: ## Build etcd, kube-apiserver, controller-manager, scheduler, kubectl, kwok into bin/k8s (cached).
	hack/controlplane.sh

.PHONY: tools
tools: $(CONTROLLER_GEN) $(GOLANGCI_LINT) ## Build controller-gen and golangci-lint into bin/tools.

$(CONTROLLER_GEN): tools/go.mod tools/go.sum
	cd tools && go build -o $@ sigs.k8s.io/controller-tools/cmd/controller-gen

$(GOLANGCI_LINT): tools/lint/go.mod tools/lint/go.sum
	cd tools/lint && go build -o $@ github.com/golangci/golangci-lint/v2/cmd/golangci-lint

##@ Run and test

.PHONY: run
run: controlplane build ## Run converge: on a local cluster when KUBECONFIG is unset.
	$(BIN)/converge dev

.PHONY: test
test: controlplane chromium ## Run every test: unit, envtest, local cluster, e2e, bench smoke; then each fuzz target for 20 s.
	go test $(TEST_FLAGS) $(SLOW_PACKAGES) ./...
	hack/fuzz-smoke.sh

.PHONY: test-unit
test-unit: ## Run the tests that need no cluster (go test -short), in seconds: no make controlplane.
	go test -short ./...

.PHONY: image-test
image-test: ## Test the image build: build linux/amd64, inspect and run it, push it to a loopback registry, rebuild, same digest.
	cd tools/image && go test $(TEST_FLAGS) -count=1 -v ./...

.PHONY: fuzz-smoke
fuzz-smoke: ## Run each fuzz target for FUZZ_TIME (default 20s); crashers land in testdata/fuzz.
	hack/fuzz-smoke.sh

.PHONY: chromium
chromium: ## Install Debian's chromium for the web UI's browser tests, unless a Chromium is there.
	@command -v chromium >/dev/null || command -v chromium-browser >/dev/null || command -v google-chrome >/dev/null || \
	  { if [ "$$(id -u)" = 0 ]; then sudo=; elif command -v sudo >/dev/null; then sudo=sudo; \
	    else echo "chromium is missing and cannot be installed without root: the browser tests will skip (outside CI)"; exit 0; fi; \
	    $$sudo apt-get update && $$sudo apt-get install -y chromium; }

.PHONY: ui-screenshots
ui-screenshots: chromium ## Refresh the web UI's screenshots in docs/ui/ from its browser tests (README shows them).
	go test -count=1 -run '^(TestPagesInTheBrowser|TestSetInTheBrowser|TestObjectInTheBrowser|TestPreviewsInTheBrowser|TestWorkloadLogsAndClustersInTheBrowser|TestCompareTwoRevisions|TestChartValuesAsRendered|TestResourceGraph)$$' ./internal/ui/
	mkdir -p docs/ui
	for page in overview-sets target set object previews pods owned clusters compare values graph; do cp bin/ui-shots/memory-$$page.png docs/ui/$$page.png; done

.PHONY: e2e
e2e: controlplane chromium ## Run the end-to-end suite: the real binary against a local cluster and git servers.
	go test -count=1 -timeout 20m -v ./e2e/

# make soak: how long the driver and the faults run for each seed (without SOAK_SEED, a
# fixed seed then a random one), and the go test timeout around it.
SOAK_DURATION ?= 5m
SOAK_TIMEOUT ?= 6h

.PHONY: soak
soak: controlplane ## Run the soak alone: the real daemons under random faults for SOAK_DURATION a seed, invariants checked throughout (SOAK_SEED replays a run, SOAK_SCALE multiplies the workload); prints its report.
	SOAK_FULL=1 SOAK_DURATION=$(SOAK_DURATION) go test -count=1 -timeout $(SOAK_TIMEOUT) -run '^TestSoak$$' -v ./e2e/

# make bench runs Flux beside converge unless BENCH_BASELINES is set (empty: converge alone).
BENCH_BASELINES ?= flux

.PHONY: flux
flux: ## Build Flux's source-, kustomize- and helm-controller into bin/flux (cached): the bench baseline.
	hack/flux.sh

.PHONY: bench
bench: controlplane $(if $(findstring flux,$(BENCH_BASELINES)),flux) ## Run the benchmarks with Flux beside converge (BENCH_N, BENCH_REPS, BENCH_WORKLOADS, BENCH_BASELINES, BENCH_PROFILE; see bench/main.go).
	BENCH_BASELINES=$(BENCH_BASELINES) go run ./bench

.PHONY: bench-smoke
bench-smoke: controlplane ## Run every benchmark workload once at tiny sizes (make test runs it too).
	go test $(TEST_FLAGS) -count=1 -run '^TestBenchSmoke$$' -v ./bench/

.PHONY: clean
clean: ## Remove bin/ (the control-plane cache outside the tree stays).
	rm -rf $(BIN)
