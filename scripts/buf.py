"""Run buf (the proto linter and formatter) without Node.js: fetch its prebuilt binary from the
npm registry once, check it against the registry's sha512, keep it under .tools/, and exec it.

    python scripts/buf.py lint
    python scripts/buf.py format --diff --exit-code --path proto/npu

`make test` needs nothing but python3, pip and make; this is how buf fits in that.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import platform
import sys
import tarfile
import urllib.request
from pathlib import Path
from typing import Final

VERSION: Final = "1.75.0"
REGISTRY: Final = "https://registry.npmjs.org"
ROOT: Final = Path(__file__).resolve().parent.parent
PACKAGES: Final = {
    ("linux", "x86_64"): "buf-linux-x64",
    ("linux", "aarch64"): "buf-linux-aarch64",
    ("linux", "arm64"): "buf-linux-aarch64",
    ("darwin", "x86_64"): "buf-darwin-x64",
    ("darwin", "arm64"): "buf-darwin-arm64",
}


def _package() -> str:
    key = (sys.platform, platform.machine().lower())
    name = PACKAGES.get(key)
    if name is None:
        sys.exit(f"buf.py: no prebuilt buf for {key[0]} {key[1]}")
    return name


def _fetch(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=60) as response:  # a fixed registry address
        data: bytes = response.read()
    return data


def _install(target: Path) -> None:
    package = _package()
    meta = json.loads(_fetch(f"{REGISTRY}/@bufbuild%2f{package}/{VERSION}"))
    dist = meta["dist"]
    tarball = _fetch(dist["tarball"])
    algorithm, _, expected = dist["integrity"].partition("-")
    if algorithm != "sha512" or base64.b64decode(expected) != hashlib.sha512(tarball).digest():
        sys.exit(f"buf.py: {dist['tarball']} does not match the registry's integrity")
    with tarfile.open(fileobj=io.BytesIO(tarball), mode="r:gz") as archive:
        member = archive.extractfile("package/bin/buf")
        if member is None:
            sys.exit("buf.py: the package holds no bin/buf")
        binary = member.read()
    target.parent.mkdir(parents=True, exist_ok=True)
    staged = target.with_suffix(".part")
    staged.write_bytes(binary)
    staged.chmod(0o755)
    staged.replace(target)


def main() -> None:
    target = ROOT / ".tools" / f"buf-{VERSION}" / "buf"
    if not target.exists():
        _install(target)
    os.execv(target, [str(target), *sys.argv[1:]])


if __name__ == "__main__":
    main()
