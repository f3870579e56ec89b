# mxserve: `make serve` serves a model, `make test` runs every CPU test. Both install what is
# missing first (Debian packages via apt-get, npm packages for the client tests).
BUILD     ?= build
JOBS      ?= $(shell nproc)
MODEL     ?=
WORKERS   ?= 2
# Where the dense model runs (--device): auto (the first GPU if there is one), cpu or cuda:N.
DEVICE    ?= auto
# Devices of the workers (--worker-devices), e.g. cuda:1,cuda:2 or cpu; empty: one per GPU of
# this host other than the coordinator's, cpu when there is none or the build has no CUDA.
WORKER_DEVICES ?=
HTTP_PORT ?= 8000
GRPC_PORT ?= 50051
HOST      ?= 0.0.0.0
CMAKE_ARGS ?=
MAKEFLAGS += --no-print-directory

.PHONY: all deps configure build serve test test-cpu client-deps tiny-model bench clean

all: build

deps:
	@scripts/install-deps.sh

configure: deps
	@cmake -S . -B $(BUILD) $(CMAKE_ARGS) >/dev/null

build: configure
	@cmake --build $(BUILD) -j$(JOBS)

# The tiny seeded random-weight gpt-oss-format model that `make serve` uses by default.
tiny-model: build
	@test -f $(BUILD)/models/tiny/config.json || \
	  $(BUILD)/bin/mxserve-make-model --preset tiny --out $(BUILD)/models/tiny

serve: build $(if $(MODEL),,tiny-model)
	@scripts/serve.sh "$(BUILD)" "$(or $(MODEL),$(BUILD)/models/tiny)" "$(WORKERS)" \
	  "$(HOST)" "$(HTTP_PORT)" "$(GRPC_PORT)" "$(WORKER_DEVICES)" "$(DEVICE)"

client-deps: deps
	@cd tests/client && (test -d node_modules/openai -a -d node_modules/@grpc/grpc-js || npm install --no-audit --no-fund --loglevel=error)

test: build client-deps
	@cd $(BUILD) && ctest --output-on-failure -j$(JOBS) --timeout 600

# libFuzzer targets (clang, ASan + UBSan) in their own build dir; FUZZ_SECONDS per target.
# docs/FUZZING.md records runs and findings.
FUZZ_BUILD   ?= build-fuzz
FUZZ_SECONDS ?= 60
.PHONY: fuzz lint-deploy
fuzz: deps
	@FUZZ_BUILD=$(FUZZ_BUILD) FUZZ_JOBS=$(JOBS) fuzz/run.sh $(FUZZ_SECONDS)

# The deployment checks alone (they also run in `make test`): systemd units, Dockerfile,
# Kubernetes manifests and the Helm chart.
lint-deploy: deps
	@deploy/lint.sh

bench: build tiny-model
	@bench/run_all.sh $(BUILD)

clean:
	rm -rf $(BUILD)
