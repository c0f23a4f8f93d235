GO      ?= go
BIN     := bin/rlsched
VERSION := $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X github.com/rlsched/rlsched/core.Version=$(VERSION)

.PHONY: build run test test-short chaos bench bench-go proto lint fuzz clean

build:
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/rlsched

# Everything on one machine: master + a local worker, SQLite, in-memory leases.
run: build
	./$(BIN) up --data-dir .rlsched

test: build
	$(GO) vet ./...
	RLSCHED_BIN=$(CURDIR)/$(BIN) $(GO) test -race -count=1 -timeout 20m ./...
	@# The sim-vs-master reality check (issue 31) replays in compressed time, so
	@# the master's own milliseconds count: alone, once the packages above are done.
	RLSCHED_REALITY=1 RLSCHED_BIN=$(CURDIR)/$(BIN) $(GO) test -count=1 -timeout 5m -run '^TestSimAgreesWithARealMaster$$' ./bench/

test-short:
	$(GO) test -short -count=1 ./...

# The chaos soak of issue 11 at full length (docs/reliability.md); `make test`
# runs a 40 s version. The report (and, when it fails, every file of the
# soak) goes to RLSCHED_CHAOS_REPORT.
RLSCHED_CHAOS_DURATION ?= 30m
RLSCHED_CHAOS_REPORT   ?= $(CURDIR)/bin/chaos
CHAOS_TIMEOUT          ?= 90m
chaos: build
	RLSCHED_BIN=$(CURDIR)/$(BIN) RLSCHED_CHAOS_DURATION=$(RLSCHED_CHAOS_DURATION) \
		RLSCHED_CHAOS_REPORT=$(RLSCHED_CHAOS_REPORT) \
		$(GO) test -count=1 -timeout $(CHAOS_TIMEOUT) -run '^TestChaosSoak$$' -v ./e2e/chaos

# Every scenario of bench/ at full size (minutes); rewrites BENCHMARKS.md.
# nginx-light is the gateway scenario's reference (a plain reverse proxy),
# installed as .ci/run installs the tests' tools.
bench:
	@command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || \
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx-light; }
	$(GO) run ./bench -all

# The Go micro-benchmarks of the hot paths (codec, ring, writer, hub).
bench-go:
	$(GO) test -run '^$$' -bench . -benchmem ./codec ./logpipe ./live

proto:
	$(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
	protoc --go_out=. --go_opt=paths=source_relative codec/pb/rlsched.proto worker/tfevents/tbpb/tfevents.proto

# Every fuzz target in turn, a minute each (the parsers of untrusted input:
# frames, TensorBoard files, nvidia-smi output, sweep specs, JSON escaping).
fuzz:
	$(GO) test ./codec -run '^$$' -fuzz FuzzNext -fuzztime 60s
	$(GO) test ./worker/tfevents -run '^$$' -fuzz FuzzFeed -fuzztime 60s
	$(GO) test ./worker/nvsmi -run '^$$' -fuzz FuzzParse -fuzztime 60s
	$(GO) test ./sweep -run '^$$' -fuzz FuzzParse -fuzztime 60s
	$(GO) test ./live -run '^$$' -fuzz FuzzAppendJSONString -fuzztime 60s

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '\.pb\.go$$')); if [ -n "$$out" ]; then echo "gofmt: $$out"; exit 1; fi
	$(GO) vet ./...

clean:
	rm -rf bin .rlsched
