#!/usr/bin/env bash
# Carry the DeepSpeed or vLLM wheels to the GPU machine in batches small enough for one device call each.
#
# The GPU machine (Python 3.12, torch 2.11, no network) gets files only with the working tree of a device call, at
# most 64 MiB a call together with the tree; files under /tmp there stay between calls while the machine is warm.
# So: build the wheel set here, split files over PART_MIB into parts, lay them out in numbered batch folders of at
# most BATCH_MIB each, carry one batch per call into /tmp/whl there, and join, check and install in the last call.
#
# Here (from the repository root; DEST must be ignored by git, the default is):
#   scripts/gpu/carry_wheels.sh build deepspeed [DEST]   # default DEST .whl_ds   (DeepSpeed 0.16.9, pure Python)
#   scripts/gpu/carry_wheels.sh build vllm [DEST]        # default DEST .whl_vllm (vLLM 0.22.1 + what the image lacks)
#   -> DEST/batch_01 ... batch_NN, each with MANIFEST.sha256; DEST/CALLS.txt lists the device calls below.
# There, one device call per batch (carry: ["DEST/batch_NN"]; the machine must stay warm between the calls):
#   bash scripts/gpu/carry_wheels.sh stage DEST/batch_NN          # copies the batch into /tmp/whl
# and, in the call that uses them (any batch may be the last one staged in the same command):
#   bash scripts/gpu/carry_wheels.sh install [/tmp/whl]           # joins parts, checks sha256, pip-installs
# Any folder of files: scripts/gpu/carry_wheels.sh pack SRC DEST (the same batches, from wheels built elsewhere).
# The LLaMA-Factory stack itself comes from ../shared/tools/gpu-wheels.sh (.whl, one call; it fits).
#
# Environment: VLLM_SET (lean|full, below), PART_MIB (default 50), BATCH_MIB (default 56: 64 MiB minus the working
# tree, ~4 MiB, and a margin),
# PYTHON (the interpreter that has torch here, used to build DeepSpeed's wheel; default python3),
# WHEEL_STAGING (default /tmp/whl), PIP_TARGET (install with --target there instead of into python3's site-packages).
set -euo pipefail

DEEPSPEED_VERSION=0.16.9 # LLaMA-Factory 0.9.5's range ends here (setup.py's deepspeed extra)
VLLM_VERSION=0.22.1      # setup.py's vllm extra; docs/install.md "Install" says why this release
PART_MIB=${PART_MIB:-50}
BATCH_MIB=${BATCH_MIB:-56}
STAGING=${WHEEL_STAGING:-/tmp/whl}
PY=${PYTHON:-python3}
PLATFORMS=(--platform manylinux2014_x86_64 --platform manylinux2010_x86_64 --platform manylinux1_x86_64)
for n in $(seq 5 39); do PLATFORMS+=(--platform "manylinux_2_${n}_x86_64"); done # pip matches each tag exactly
TARGET312=(--python-version 3.12 --implementation cp --abi cp312 --only-binary=:all: "${PLATFORMS[@]}")

# DeepSpeed's needs (its METADATA Requires-Dist: einops hjson msgpack ninja numpy packaging psutil py-cpuinfo
# pydantic torch tqdm) that the GPU image lacks; pydantic brings pydantic-core, annotated-types, typing-inspection.
DEEPSPEED_DEPS=(hjson pydantic pydantic-core annotated-types typing-inspection)

# Packages of the GPU image ('cuda', read 2026-11-17; .library/device/KINDS.md) and the LLaMA-Factory stack that
# gpu-wheels.sh carries: the vLLM set leaves these out (installed with --no-deps, the image's versions stay).
IMAGE_PACKAGES="absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch build
certifi charset-normalizer chex click cloudpickle cmake colorama contourpy coverage cuda-bindings cuda-core
cuda-pathfinder cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops equinox etils execnet filelock flatbuffers
flax fonttools formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx huggingface-hub humanize
hypothesis idna imageio iniconfig interface-meta jax jax-cuda13-pjrt jax-cuda13-plugin jaxlib jaxtyping jinja2 joblib
kiwisolver lazy-loader lightning lightning-utilities linear-operator lineax llvmlite lxml markdown markdown-it-py
markupsafe matplotlib mdurl meson ml-dtypes mpi4py mpmath msgpack multidict multipledispatch mypy-extensions nanobind
narwhals networkx ninja numba numba-cuda numpy numpyro nvidia-cublas nvidia-cuda-cupti nvidia-cuda-nvrtc
nvidia-cuda-runtime nvidia-cudnn-cu13 nvidia-cufft nvidia-cufile nvidia-curand nvidia-cusolver nvidia-cusparse
nvidia-cusparselt-cu13 nvidia-ml-py nvidia-nccl-cu13 nvidia-nvjitlink nvidia-nvshmem-cu13 nvidia-nvtx onnx onnx-ir
onnxruntime onnxscript opencv-python-headless optax opt-einsum opt-einsum-fx optimistix orbax-checkpoint packaging
pandas pathspec patsy peft pillow pip pluggy portalocker prometheus-client propcache protobuf psutil pyarrow pybind11
py-cpuinfo pygments pyparsing pyproject-hooks pyre-extensions pytest pytest-benchmark pytest-cov pytest-mock
pytest-timeout pytest-xdist python-dateutil pytorch-lightning pyyaml regex requests rich sacrebleu safetensors
scikit-build-core scikit-image scikit-learn scipy seaborn sentencepiece sentence-transformers setuptools shellingham
simplejson six sortedcontainers statsmodels sympy tabulate tensorboard tensorboard-data-server tensorstore
threadpoolctl tifffile tiktoken timm tokenizers toolz torch torchaudio torchdiffeq torch-geometric torchmetrics
torchvision tqdm transformers treescope triton typer typing-extensions typing-inspect urllib3 uvloop wadler-lindig
werkzeug wheel wrapt xarray xxhash yarl zipp
llamafactory trl datasets dill multiprocess omegaconf antlr4-python3-runtime bm25s math-verify latex2sympy2-extended
tenacity fire termcolor orjson opentelemetry-api"

# VLLM_SET=lean (default) leaves out vLLM's optional kernel packages, about 787 of its 1131 MiB: FlashInfer (the
# cubin package alone is 344 MiB), the CUTLASS DSL, TileLang, tokenspeed, CUDA's nvcc/nvvm wheels and their needs.
# vLLM then uses its bundled FlashAttention and PyTorch sampling: seen running on the H200 on 2026-12-04
# (benchmarks/results/scale_h200). apache-tvm-ffi (and its torch-c-dlpack-ext) stay in: xgrammar, which vLLM's
# request path imports, needs `tvm_ffi` (without it: `ModuleNotFoundError: No module named 'tvm_ffi'` at the first
# generate). VLLM_SET=full carries all of it (21 batches).
VLLM_LEAN_OUT="flashinfer-cubin flashinfer-python nvidia-cutlass-dsl
nvidia-cutlass-dsl-libs-base nvidia-cutlass-dsl-libs-cu13 cuda-python cuda-tile tilelang z3-solver tokenspeed-triton
tokenspeed-mla humming-kernels quack-kernels nvidia-cuda-nvcc nvidia-nvvm nvidia-cuda-crt nvidia-cuda-cccl"

die() {
  echo "carry_wheels: $*" >&2
  exit 1
}

pin() { # NAME -> NAME==VERSION from constraints.txt when pinned there
  local v
  v=$(grep -iE "^${1//-/[-_]}==" "$ROOT/constraints.txt" | head -1 || true)
  echo "${v:-$1}"
}

layout() { # DEST/all -> DEST/batch_NN: split big files, pack batches, write manifests
  local dest=$1
  (
    cd "$dest/all"
    for f in *; do
      case $f in *.part.*) continue ;; esac
      if [ "$(stat -c %s "$f")" -gt $((PART_MIB * 1024 * 1024)) ]; then
        split -b "${PART_MIB}M" -d -a 3 "$f" "$f.part."
      fi
    done
    sha256sum $(ls | grep -v '\.part\.') >../MANIFEST.sha256
    ls | grep '\.part\.' >../PARTS || true # every part, so that install can tell a batch is missing
  )
  "$PY" - "$dest" "$BATCH_MIB" <<'PY'
import os, shutil, sys

dest, limit = sys.argv[1], int(sys.argv[2]) * 1024 * 1024
src = os.path.join(dest, "all")
names = sorted(os.listdir(src))
parted = {n.split(".part.")[0] for n in names if ".part." in n}
files = [n for n in names if n not in parted]  # a split file travels as its parts only
files.sort(key=lambda n: -os.path.getsize(os.path.join(src, n)))
batches = []  # first fit, largest first
for n in files:
    size = os.path.getsize(os.path.join(src, n))
    if size > limit:
        sys.exit(f"{n} ({size} bytes) is over the batch limit; lower PART_MIB")
    for b in batches:
        if b[0] + size <= limit:
            b[0] += size
            b[1].append(n)
            break
    else:
        batches.append([size, [n]])
with open(os.path.join(dest, "CALLS.txt"), "w") as calls:
    for i, (size, members) in enumerate(batches, 1):
        folder = os.path.join(dest, f"batch_{i:02d}")
        os.makedirs(folder)
        for n in members:
            os.link(os.path.join(src, n), os.path.join(folder, n))
        shutil.copy(os.path.join(dest, "MANIFEST.sha256"), folder)
        shutil.copy(os.path.join(dest, "PARTS"), folder)
        rel = os.path.relpath(folder, os.environ["CALLS_ROOT"]) if "CALLS_ROOT" in os.environ else folder
        calls.write(f"{rel}\t{size / 2**20:.1f} MiB\t{len(members)} files\n")
        print(f"{rel}: {size / 2**20:.1f} MiB, {len(members)} files")
    print(f"{len(batches)} batches, {sum(b[0] for b in batches) / 2**20:.1f} MiB in all")
PY
}

build_deepspeed() {
  local dest=$1
  "$PY" -c "import torch" 2>/dev/null || die "PYTHON=$PY has no torch (DeepSpeed's setup.py imports it)"
  # --no-build-isolation runs DeepSpeed's setup.py with PYTHON's own packages: without `wheel` it stops at
  # "error: invalid command 'bdist_wheel'" (a fresh `make install` venv has none)
  "$PY" -c "import wheel" 2>/dev/null || die "PYTHON=$PY has no 'wheel' package: $PY -m pip install wheel"
  DS_BUILD_OPS=0 "$PY" -m pip wheel -q --no-deps --no-build-isolation -w "$dest/all" "deepspeed==$DEEPSPEED_VERSION"
  local specs=()
  for p in "${DEEPSPEED_DEPS[@]}"; do specs+=("$(pin "$p")"); done
  "$PY" -m pip download -q --no-deps "${TARGET312[@]}" -d "$dest/all" "${specs[@]}"
}

build_vllm() {
  local dest=$1 report
  report=$(mktemp)
  # resolve vLLM's closure for Python 3.12 under the project's pins (metadata only), then download what is missing
  "$PY" -m pip install -q --dry-run --ignore-installed --target "$(mktemp -d)" "${TARGET312[@]}" \
    -c "$ROOT/constraints.txt" --report "$report" "vllm==$VLLM_VERSION"
  local leave_out=$IMAGE_PACKAGES
  [ "${VLLM_SET:-lean}" = full ] || leave_out="$leave_out $VLLM_LEAN_OUT"
  mapfile -t specs < <("$PY" - "$report" "$leave_out" <<'PY'
import json, re, sys

present = {re.sub(r"[-_.]+", "-", n).lower() for n in sys.argv[2].split()}
for item in json.load(open(sys.argv[1]))["install"]:
    name, version = item["metadata"]["name"], item["metadata"]["version"]
    if re.sub(r"[-_.]+", "-", name).lower() not in present:
        print(f"{name}=={version}")
PY
  )
  # vLLM's CUDA IPC weight-transfer engine (one GPU shared by trainer and server) imports ray; its needs are in the image
  specs+=("ray==${RAY_VERSION:-2.52.1}")
  echo "vLLM set (${VLLM_SET:-lean}): ${#specs[@]} packages the GPU image lacks"
  "$PY" -m pip download -q --no-deps "${TARGET312[@]}" -d "$dest/all" "${specs[@]}"
}

cmd=${1:-}
case $cmd in
build)
  what=${2:-}
  ROOT=$(git rev-parse --show-toplevel)
  export ROOT
  cd "$ROOT"
  case $what in
  deepspeed) dest=${3:-.whl_ds} ;;
  vllm) dest=${3:-.whl_vllm} ;;
  *) die "build deepspeed|vllm [DEST]" ;;
  esac
  case $dest in /*) ;; *) dest=$ROOT/$dest ;; esac
  mkdir -p "$(dirname "$dest")"
  # DEST inside a git work tree (this one or e.g. the main checkout that makes the device calls): keep it out of git,
  # or it would travel with every call's working tree
  if top=$(git -C "$(dirname "$dest")" rev-parse --show-toplevel 2>/dev/null) && [ "${dest#"$top"/}" != "$dest" ]; then
    rel=/${dest#"$top"/}/
    exclude=$(cd "$top" && realpath "$(git rev-parse --git-common-dir)")/info/exclude
    grep -qxF "$rel" "$exclude" 2>/dev/null || echo "$rel" >>"$exclude"
    export CALLS_ROOT=$top
  fi
  rm -rf "$dest" && mkdir -p "$dest/all"
  "build_$what" "$dest"
  layout "$dest"
  rm -rf "$dest/all"
  echo "wheels: $(cut -c67- "$dest/MANIFEST.sha256" | tr '\n' ' ')"
  ;;
pack) # pack SRC DEST: lay out the files of SRC (wheels built elsewhere) as DEST/batch_NN
  src=${2:?pack SRC DEST}
  dest=${3:?pack SRC DEST}
  rm -rf "$dest" && mkdir -p "$dest/all"
  cp "$src"/* "$dest/all/"
  layout "$dest"
  rm -rf "$dest/all"
  ;;
stage)
  batch=${2:?stage BATCH_FOLDER}
  mkdir -p "$STAGING"
  cp "$batch"/* "$STAGING"/
  echo "staged $(ls "$batch" | wc -l) files from $batch; $STAGING holds $(du -sh "$STAGING" | cut -f1)"
  ;;
install)
  dir=${2:-$STAGING}
  cd "$dir"
  [ -f MANIFEST.sha256 ] || die "$dir/MANIFEST.sha256 missing: stage the batches first"
  # every file present whole or in all its parts before anything is joined (a later batch may still be missing)
  missing=$(cut -c67- MANIFEST.sha256 | while read -r f; do
    [ -e "$f" ] && continue
    parts=$(grep -F "$f.part." PARTS || true)
    [ -n "$parts" ] || { echo "$f"; continue; }
    for p in $parts; do [ -e "$p" ] || echo "$p"; done
  done)
  [ -z "$missing" ] || die "not staged yet: $(echo $missing)"
  for first in *.part.000; do
    [ -e "$first" ] || continue
    whole=${first%.part.000}
    cat "$whole".part.* >"$whole" && rm -f "$whole".part.*
  done
  sha256sum --quiet -c MANIFEST.sha256 || die "checksum mismatch: a batch was carried incompletely"
  wheels=$(cut -c67- MANIFEST.sha256 | sed "s|^|$dir/|")
  if [ -n "${PIP_TARGET:-}" ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$PIP_TARGET" $wheels
  else
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade $wheels
  fi
  echo "installed $(echo "$wheels" | wc -l) wheels from $dir"
  ;;
*)
  sed -n '2,23p' "$0"
  exit 2
  ;;
esac
