# tiertrain: `make run` trains the built-in demo model, `make test` runs the CPU test suite
# (also under AddressSanitizer + UBSan). Both install the Debian packages they need first.
BUILD ?= build
SANITIZE_BUILD ?= build-sanitize
JOBS ?= $(shell nproc)

.PHONY: all deps test-deps build run test test-sanitize test-fuzz fuzz fuzz-build test-gpu bench clean

all: build

deps:
	@bash tools/install_deps.sh

# what only the tests need (fuzzing's clang, MPI, Chromium, npm), before the build so that it finds MPI
test-deps:
	@bash tools/install_deps.sh --tests

build: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release
	cmake --build $(BUILD) -j$(JOBS)

run: build
	bash tools/demo.sh $(BUILD)/tiertrain

test: test-deps build
	cd $(BUILD) && ctest --output-on-failure -j$(JOBS)
	$(MAKE) test-sanitize

test-sanitize: test-deps
	cmake -S . -B $(SANITIZE_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTT_SANITIZE=ON
	cmake --build $(SANITIZE_BUILD) -j$(JOBS)
	cd $(SANITIZE_BUILD) && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --output-on-failure -j$(JOBS)
	$(MAKE) test-fuzz

# Fuzzing (fuzz/README.md): libFuzzer harnesses for the file readers, built with clang, ASan and
# UBSan into $(FUZZ_BUILD). `make fuzz` replays every file of fuzz/corpus/<target>/ (seeds and
# past findings), then fuzzes each target for FUZZ_SECONDS (auto: each target's own time, long enough to find its
# past findings again from the seeds alone: fuzz/run.sh); any crash, sanitizer report, leak or timeout fails it.
# `make test` runs the short version (FUZZ_SECONDS=25) where clang is installed.
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= auto
FUZZ_CC ?= clang
FUZZ_TARGETS := safetensors model_config token_file token_file_v2 tokenizer tokenizer_regex run_config json_dataset \
                chat_template parquet
FUZZ_SOURCES := src/core/check.c src/core/file_names.c src/core/hf_cache.c src/core/python_format.c $(sort $(filter-out src/config/run_translation.c,$(wildcard src/config/*.c))) src/core/dtype.c src/core/fault_inject.c src/core/input_file.c src/core/json_describe.c src/core/rng.c src/model/safetensors.c \
                src/model/bnb_checkpoint.c src/model/quant4.c src/model/lora_modules.c $(sort $(wildcard src/model/arch*.c)) \
                src/model/config_reader.c src/model/saved_slots.c \
                src/model/model_config.c src/train/data.c $(sort $(wildcard src/data/*.c))
FUZZ_CFLAGS := -std=c11 -g -O1 -fno-omit-frame-pointer -DTT_FUZZING -D_GNU_SOURCE -D_FILE_OFFSET_BITS=64 -Isrc \
               -Wall -Wextra -Wno-unused-parameter -fsanitize=address,undefined -fno-sanitize-recover=undefined
FUZZ_PKGS := jansson libpcre2-8 libutf8proc yaml-0.1 zlib libzstd snappy
FUZZ_OBJECTS := $(patsubst src/%.c,$(FUZZ_BUILD)/obj/%.o,$(FUZZ_SOURCES))

$(FUZZ_BUILD)/obj/%.o: src/%.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) $$(pkg-config --cflags $(FUZZ_PKGS)) -fsanitize=fuzzer-no-link -MMD -MP -c $< -o $@

$(FUZZ_BUILD)/fuzz_%: fuzz/fuzz_%.c fuzz/fuzz_common.h $(FUZZ_OBJECTS)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -DFUZZ_FIXTURES='"$(CURDIR)/tests/fixtures"' $$(pkg-config --cflags $(FUZZ_PKGS)) -fsanitize=fuzzer $< $(FUZZ_OBJECTS) \
	  $$(pkg-config --libs $(FUZZ_PKGS)) -lm -lpthread -o $@

# kept between runs (make would delete them as intermediates of the pattern rule)
.SECONDARY: $(FUZZ_OBJECTS)

-include $(FUZZ_OBJECTS:.o=.d)

fuzz-build: test-deps
	$(MAKE) $(addprefix $(FUZZ_BUILD)/fuzz_,$(FUZZ_TARGETS))

fuzz: fuzz-build
	bash fuzz/run.sh $(FUZZ_BUILD) $(FUZZ_SECONDS) $(FUZZ_TARGETS)

# The short run of `make test`: skipped, with a note, where clang or libFuzzer is missing.
test-fuzz:
	@if command -v $(FUZZ_CC) >/dev/null && ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-*.a >/dev/null 2>&1; then \
	  $(MAKE) fuzz FUZZ_SECONDS=25; \
	else echo "test-fuzz: skipped ($(FUZZ_CC) with libFuzzer not installed: apt-get install clang libclang-rt-14-dev)"; fi

# On a machine with an NVIDIA GPU (Hopper): every CUDA kernel against the CPU reference, the
# fused attention kernels, and the whole model against the CPU backend.
test-gpu: build
	bash tools/gpu_suite.sh $(BUILD) $(CURDIR)

# On the GPU machine: tiertrain and the PyTorch peer side by side (see bench/run.sh).
bench: build
	bash bench/run.sh $(BUILD)/tiertrain

clean:
	rm -rf $(BUILD) $(SANITIZE_BUILD) $(FUZZ_BUILD)
