#!/usr/bin/env bash
# Run hack/gpu/nvml_check.py on the lent GPU machine (the `run` device tool), from the repository root:
#   run(command="bash hack/gpu/device_run.sh", carry=[".whl"], timeout_s=300)
# .whl/ (git-ignored) holds the Python 3.12 wheels the machine's image lacks: orjson, kubernetes_asyncio,
# and nvidia-ml-py at the project's version. Fetch them here first with:
#   python3.12 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
#     -d .whl orjson==3.13.0 kubernetes_asyncio==36.1.0 nvidia-ml-py==13.615.71
set -o pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || exit 3
export PYTHONPATH="/tmp/site:$PWD" PYTHONUNBUFFERED=1
OUT="${OUT:-/tmp/nvml_check_out}"
mkdir -p "$OUT"
python3 --version
python3 -c 'import pynvml, orjson, kubernetes_asyncio, aiohttp; print("pynvml", pynvml.__file__); print("aiohttp", aiohttp.__version__)'
python3 hack/gpu/nvml_check.py "$@" 2>&1 | tee "$OUT/nvml_check.log"
