# Quick start: `make serve` (the shipped configuration with the default voice) and `make test`.
# Both build .venv from nothing on first use; later runs reuse it.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.voxpool-installed
PYTEST_ARGS ?=

.PHONY: serve test test-load install voice bench capacity gpu-check test-hog clean image test-image

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# CPU build of torch: on the project's machines this pin resolves to a local CPU wheel.
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e ".[dev,pipecat,livekit,gateway]"
	# pipecat-ai declares protobuf<7, which the gRPC pins rule out; its core runs on protobuf 7 (see pyproject.toml)
	$(PY) -m pip install --quiet --no-deps pipecat-ai==1.14.0
	touch $(STAMP)

install: $(STAMP)

voice: $(STAMP)
	$(VENV)/bin/voxpool voices install baker-zh

# The shipped configuration (audio cache on, `voxpool cache stats` against :50051, metrics on 9464), with the
# one difference a fresh machine needs: the voice is installed on first start (the images bake it in instead).
# SERVE_ARGS="--port 50061" for another port; VOXPOOL__SECTION__KEY variables override any key.
SERVE_ARGS ?=
serve: $(STAMP)
	VOXPOOL__VOICE__AUTO_INSTALL=true $(VENV)/bin/voxpool serve --config deploy/config/voxpool.yaml $(SERVE_ARGS)

# The default suite asserts behaviour, order and causality, never wall time; tests/load is left out.
test: $(STAMP)
	$(PY) -m pytest -q $(PYTEST_ARGS)

# The load lane: latency percentiles, wall and CPU time, on-time fractions, the soak slope, DNSMOS.
test-load: $(STAMP)
	$(PY) -m pytest -q --load tests/load $(PYTEST_ARGS)

# The default suite HOG_RUNS times in a row beside a 2-thread CPU hog (docs/reliability.md §5): 10–14 min a run on
# an AVX-512 host, 15–21 min on the AVX2-only VM (ten do not fit in a 3-hour session there: after a session ended
# under a count, `make test-hog HOG_ARGS=--resume` goes on with it if only docs/ changed since).
HOG_RUNS ?= 10
HOG_ARGS ?=
test-hog: $(STAMP)
	$(PY) -m tests.reliability.hog_runs --runs $(HOG_RUNS) --hog-threads 2 --json bench-results/hog-runs.json \
		--logs bench-results/hog-runs $(HOG_ARGS)

# The CPU image (deploy/Dockerfile.cpu) with podman; where registries are out of reach, from Debian's packages and
# a local torch wheel: `make image IMAGE_BASE=mmdebstrap TORCH_WHEELS=/opt/wheels` (deploy/build_image.sh says more).
# `make test-image` then runs it: ready, a sentence synthesized over gRPC, uid 10001, read-only root, SIGTERM exit 0.
image:
	bash deploy/build_image.sh

test-image: $(STAMP)
	VOXPOOL_IMAGE=$${IMAGE_TAG:-voxpool:0.1.0-cpu} $(PY) -m pytest -q tests/deploy/test_image.py $(PYTEST_ARGS)

# The load generator against a running server (`make serve` in another shell): BENCH_ARGS="--help" lists its options.
BENCH_ARGS ?= --targets localhost:50051 --rates 0.5,1,2,4 --out bench-results/bench.json
bench: $(STAMP)
	mkdir -p bench-results
	$(PY) -m bench.grpc_load $(BENCH_ARGS)

# The capacity run: gRPC REALTIME calls (engine, naive), the in-process paced and always-busy runs, the sizing summary
# and the server.max_calls to ship for this host (docs/benchmarks.md, docs/deploy.md).
# About 20 minutes with the default 30 s per level; CAPACITY_ARGS="--duration-s 5 --levels 1,2" for a smoke run.
CAPACITY_ARGS ?=
capacity: $(STAMP)
	$(PY) -m bench.capacity --json bench-results/capacity.json $(CAPACITY_ARGS)

# The one prepared run for a lent GPU (docs/benchmarks.md, "On a GPU"): exactness, always busy, paced in process and
# over gRPC at 64/128/256, one JSON; under 8 minutes with these arguments. GPU_CHECK_ARGS="--smoke" for a CPU dry run.
GPU_CHECK_ARGS ?= --levels 64,128,256 --duration-s 20 --busy-requests 2
gpu-check: $(STAMP)
	$(PY) -m bench.gpu_session --out bench-results/gpu-check.json $(GPU_CHECK_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache
