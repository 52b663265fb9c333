# tokentap build, test and measurement targets.
#   make test   everything CI runs: lint, unit tests with the race detector, end-to-end checks
#   make unit   unit tests only (fast loop while developing)
#   make bench  benchmarks of the hot paths and of accuracy against the fake engine
#   make fuzz   every fuzz target for FUZZTIME each
#   make live   the live tier: real llama-server and Ollama (skipped, loudly, where absent)
#   make soak   (not in CI) 1,024 streams through the proxy for 10 minutes: memory, descriptors, records
#   make soak-fd  (not in CI) the soak under ulimit -n SOAK_NOFILE, with a burst of idle connections over it
#   make fuzz-proxy  (not in CI) mutated requests and responses against a running proxy for FUZZ_PROXY_TIME
#   make bench-wire  (not in CI; root or CAP_NET_RAW) tokentap's errors against a tcpdump capture of the loopback

GO        ?= go
PKG       := github.com/tokentap/tokentap
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT    ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
DATE      ?= $(shell date -u +%Y-%m-%dT%H:%M:%SZ)
LDFLAGS   := -s -w -X main.version=$(VERSION) -X main.commit=$(COMMIT) -X main.date=$(DATE)
BIN       := bin/tokentap
FUZZTIME  ?= 60s
BENCHTIME ?= 1s
SOAK_DURATION   ?= 10m
SOAK_STREAMS    ?= 1024
FUZZ_PROXY_TIME ?= 10m
SOAK_NOFILE     ?= 512
SOAK_FD_STREAMS ?= 128
SOAK_FD_BURST   ?= 1024
STATICCHECK_VERSION ?= v0.8.2
WIRE_STREAMS ?= 64 512 1024 2048
WIRE_GAPS    ?= 20ms 10ms
WIRE_WINDOW  ?= 20s
WIRE_LEGS    ?= fake outside proxy nginx
WIRE_OUT     ?= $(CURDIR)/bin/bench-wire.json

# The live tier's engines: TOKENTAP_LLAMA_SERVER and TOKENTAP_OLLAMA name
# their binaries; by default the ones in $(ENGINE_CACHE)/bin, where they exist.
ENGINE_CACHE ?= $(or $(TOKENTAP_ENGINE_CACHE),$(HOME)/.cache/tokentap/engines)
TOKENTAP_LLAMA_SERVER ?= $(wildcard $(ENGINE_CACHE)/bin/llama-server)
TOKENTAP_OLLAMA ?= $(wildcard $(ENGINE_CACHE)/bin/ollama)
LIVE_LOG ?= $(or $(TMPDIR),/tmp)/tokentap-live.log
LIVE_ENGINE_LOGS ?= $(or $(TMPDIR),/tmp)/tokentap-live-engines

# The container image (Dockerfile), tagged $(IMAGE):$(VERSION); the
# kustomization under deploy/kubernetes pins the tag the manifests run.
# Then: docker push $(IMAGE):$(VERSION), and set newTag (or the pushed
# digest) in deploy/kubernetes/kustomization.yaml. IMAGE=REGISTRY/tokentap
# for your own registry.
IMAGE  ?= ghcr.io/tokentap/tokentap
DOCKER ?= docker

.PHONY: image build test unit race lint manifests e2e live bench bench-wire fuzz soak soak-fd fuzz-proxy deps tools clean demo

build:
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/tokentap

image:
	$(DOCKER) build --build-arg VERSION=$(VERSION) --build-arg COMMIT=$(COMMIT) --build-arg DATE=$(DATE) \
	  -t $(IMAGE):$(VERSION) .
	@echo "built $(IMAGE):$(VERSION); push it ($(DOCKER) push $(IMAGE):$(VERSION)) and pin it in deploy/kubernetes/kustomization.yaml"

demo: build
	./$(BIN) matrix

# The one command that runs all tests (README, .ci/run). The live tier
# runs where the engines are (make live), and says it skipped where not.
test: deps lint race manifests e2e live

unit:
	$(GO) test ./...

race:
	$(GO) test -race -count=1 -timeout 10m ./...

lint: tools
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags 'e2e soak fuzzproxy' ./e2e/
	$(GO) vet -tags wire ./wirebench/
	$$($(GO) env GOPATH)/bin/staticcheck ./...
	$$($(GO) env GOPATH)/bin/staticcheck -tags 'e2e soak fuzzproxy' ./e2e/
	$$($(GO) env GOPATH)/bin/staticcheck -tags wire ./wirebench/

# The deployment files (deploy/, a module of its own so tokentap's does
# not depend on Kubernetes): every manifest decoded strictly with the
# Kubernetes API's types, and its wiring checked. No cluster needed.
manifests: tools
	cd deploy && $(GO) vet ./... && $$($(GO) env GOPATH)/bin/staticcheck ./... && $(GO) test -count=1 ./...

# Slow end-to-end checks: the built binary as a user runs it. The fault
# suite's proxies run side by side (-parallel): most of its time is waiting.
e2e: build
	TOKENTAP_BIN=$(CURDIR)/$(BIN) $(GO) test -count=1 -timeout 15m -parallel 8 -tags e2e ./e2e/...

# Not in CI: SOAK_STREAMS streams through the built proxy for SOAK_DURATION
# against the fake engine; prints RSS, descriptors and goroutines at start,
# middle and end, and records written against requests sent.
soak: build
	TOKENTAP_BIN=$(CURDIR)/$(BIN) TOKENTAP_SOAK_DURATION=$(SOAK_DURATION) TOKENTAP_SOAK_STREAMS=$(SOAK_STREAMS) \
	  $(GO) test -count=1 -timeout 0 -tags 'e2e soak' -run '^TestSoak$$' -v ./e2e/

# Not in CI: the soak under a descriptor limit (issue 22): the proxy runs
# under ulimit -n SOAK_NOFILE with SOAK_FD_STREAMS streams (each holds two
# descriptors, client and engine: half the limit), and a third of the way in SOAK_FD_BURST idle connections,
# more than the limit, are held for 5 s. The proxy must live through it and
# lose no record.
soak-fd: build
	TOKENTAP_BIN=$(CURDIR)/$(BIN) TOKENTAP_SOAK_DURATION=$(SOAK_DURATION) TOKENTAP_SOAK_STREAMS=$(SOAK_FD_STREAMS) \
	  TOKENTAP_SOAK_NOFILE=$(SOAK_NOFILE) TOKENTAP_SOAK_IDLE_BURST=$(SOAK_FD_BURST) \
	  $(GO) test -count=1 -timeout 0 -tags 'e2e soak' -run '^TestSoak$$' -v ./e2e/

# Not in CI: mutated requests and engine responses, at the socket level,
# against the built proxy for FUZZ_PROXY_TIME (TOKENTAP_FUZZ_SEED replays).
fuzz-proxy: build
	TOKENTAP_BIN=$(CURDIR)/$(BIN) TOKENTAP_FUZZ_TIME=$(FUZZ_PROXY_TIME) \
	  $(GO) test -count=1 -timeout 0 -tags 'e2e fuzzproxy' -run '^TestFuzzProxy' -v ./e2e/

# The live tier (build tag live): probes, proxy and matrix against a real
# llama-server and Ollama serving a tiny model tokentap writes. The full log
# goes to $(LIVE_LOG), a failed check's engine log to $(LIVE_ENGINE_LOGS);
# the output says why a check failed and ends with one line per engine.
live:
	@echo "live tier: llama-server=$(or $(TOKENTAP_LLAMA_SERVER),(none)) ollama=$(or $(TOKENTAP_OLLAMA),(none)); log: $(LIVE_LOG)"
	@rm -rf '$(LIVE_ENGINE_LOGS)'; \
	  TOKENTAP_LLAMA_SERVER='$(TOKENTAP_LLAMA_SERVER)' TOKENTAP_OLLAMA='$(TOKENTAP_OLLAMA)' TOKENTAP_LIVE_LOGS='$(LIVE_ENGINE_LOGS)' \
	  $(GO) test -tags live -count=1 -v -timeout 15m ./live/ >'$(LIVE_LOG)' 2>&1; rc=$$?; \
	  grep -E '^    --- (PASS|FAIL)|^--- (PASS|FAIL|SKIP)' '$(LIVE_LOG)'; \
	  if [ $$rc -ne 0 ]; then awk -f live/failures.awk '$(LIVE_LOG)'; fi; \
	  if ! grep -q '^live ' '$(LIVE_LOG)'; then tail -n 40 '$(LIVE_LOG)'; fi; \
	  grep '^live ' '$(LIVE_LOG)'; exit $$rc

# One package at a time (-p 1): the benchmarks pin processes to CPUs and
# measure CPU time, so two packages' benchmarks at once spoil each other.
bench: deps build
	TOKENTAP_BIN=$(CURDIR)/$(BIN) $(GO) test -p 1 -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) -timeout 30m ./...

# Not in CI: tokentap against the wire (docs/METHOD.md, "How tokentap's own
# accuracy is established"). tcpdump captures the loopback with kernel
# timestamps while tokentap matrix runs WIRE_STREAMS streams for WIRE_WINDOW
# at each of WIRE_GAPS against the fake engine, an outside fake, and through
# tokentap's proxy and nginx; prints the errors and writes WIRE_OUT. Needs
# root or CAP_NET_RAW (tcpdump); installs tcpdump and nginx where missing.
bench-wire: build
	@missing=""; \
	  command -v tcpdump >/dev/null 2>&1 || [ -x /usr/sbin/tcpdump ] || missing="$$missing tcpdump"; \
	  command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || missing="$$missing nginx-light"; \
	  if [ -n "$$missing" ]; then \
	    echo "installing:$$missing"; \
	    if [ "$$(id -u)" = 0 ]; then SUDO=""; else SUDO=sudo; fi; \
	    $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null; \
	  fi
	@if [ "$$(id -u)" != 0 ]; then \
	  echo "bench-wire: not root: tcpdump needs CAP_NET_RAW (sudo make bench-wire, or setcap cap_net_raw,cap_net_admin=eip $$(command -v tcpdump || echo /usr/bin/tcpdump))"; fi
	PATH="$$PATH:/usr/sbin" TOKENTAP_BIN=$(CURDIR)/$(BIN) WIRE_STREAMS='$(WIRE_STREAMS)' WIRE_GAPS='$(WIRE_GAPS)' WIRE_WINDOW='$(WIRE_WINDOW)' \
	  WIRE_LEGS='$(WIRE_LEGS)' WIRE_OUT='$(WIRE_OUT)' \
	  $(GO) test -count=1 -timeout 0 -tags wire -run '^(TestTargetsMissed|TestWire)$$' -v ./wirebench/

fuzz:
	@for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg 2>/dev/null | grep '^Fuzz'); do \
	    echo "== $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
	  done; \
	done

tools:
	@test -x $$($(GO) env GOPATH)/bin/staticcheck || $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

# System packages the tests drive for real: nginx (proxy reference in benches),
# chromium (HTML report screenshot test). Installed only when missing.
deps:
	@missing=""; \
	  command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || missing="$$missing nginx-light"; \
	  command -v chromium >/dev/null 2>&1 || missing="$$missing chromium"; \
	  if [ -n "$$missing" ]; then \
	    echo "installing:$$missing"; \
	    if [ "$$(id -u)" = 0 ]; then SUDO=""; else SUDO=sudo; fi; \
	    $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null; \
	  fi

clean:
	rm -rf bin
