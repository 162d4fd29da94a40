# tiertrain: `make run` trains the built-in demo model, `make test` runs the CPU test suite
# (also under AddressSanitizer + UBSan). Both install the Debian packages they need first.
BUILD ?= build
SANITIZE_BUILD ?= build-sanitize
JOBS ?= $(shell nproc)

.PHONY: all deps build run test test-sanitize test-gpu bench clean

all: build

deps:
	@bash tools/install_deps.sh

build: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release
	cmake --build $(BUILD) -j$(JOBS)

run: build
	bash tools/demo.sh $(BUILD)/tiertrain

test: build
	cd $(BUILD) && ctest --output-on-failure -j$(JOBS)
	$(MAKE) test-sanitize

test-sanitize: deps
	cmake -S . -B $(SANITIZE_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTT_SANITIZE=ON
	cmake --build $(SANITIZE_BUILD) -j$(JOBS)
	cd $(SANITIZE_BUILD) && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --output-on-failure -j$(JOBS)

# On a machine with an NVIDIA GPU (Hopper): every CUDA kernel against the CPU reference, the
# fused attention kernels, and the whole model against the CPU backend.
test-gpu: build
	bash tools/gpu_suite.sh $(BUILD) $(CURDIR)

# On the GPU machine: tiertrain and the PyTorch peer side by side (see bench/run.sh).
bench: build
	bash bench/run.sh $(BUILD)/tiertrain

clean:
	rm -rf $(BUILD) $(SANITIZE_BUILD)
