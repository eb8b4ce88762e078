"""Hot reload under load: every call succeeds and sees exactly one policy, whole."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from npu_resolver import Resolution, ResolveRequest, parse_policy
from npu_resolver_client import AsyncResolverClient
from npu_resolver_server import PolicyStore, ServerSettings
from tests._server import ThreadServer

POLICY_A = "[profiles.default.defaults]\nhccl_timeout = 3600\nop_wait_timeout = 300\n"
POLICY_B = "[profiles.default.defaults]\nhccl_timeout = 1224\nop_wait_timeout = 600\n"
EXPECTED = {
    parse_policy(POLICY_A).version: (3600, 300),
    parse_policy(POLICY_B).version: (1224, 600),
}


def _swap_files(path: Path, store: PolicyStore, stop: threading.Event) -> int:
    """Replace the file with B, garbage, A and a bad option in turn, reloading after each."""
    swaps = 0
    contents = (POLICY_B, "[[[ not toml", POLICY_A, "[profiles.default.defaults]\nnope = 1\n")
    while not stop.is_set() and swaps < 400:
        staged = path.with_suffix(".staged")
        staged.write_text(contents[swaps % len(contents)])
        staged.replace(path)  # as a ConfigMap update does: the file changes whole, at once
        store.check_file()
        swaps += 1
    return swaps


async def _load(target: str, rounds: int) -> list[tuple[str, int, int]]:
    seen: list[tuple[str, int, int]] = []
    async with AsyncResolverClient(target, timeout=20) as client:

        async def one(i: int) -> None:
            if i % 5 == 0:  # a batch must never mix two policies
                items = await client.resolve_batch(
                    [ResolveRequest(product="atlas-a2", workdir=f"/job/{i}/{k}") for k in range(8)]
                )
                versions = set()
                for item in items:
                    assert isinstance(item, Resolution), item
                    versions.add(item.policy_version)
                    seen.append(
                        (
                            item.policy_version,
                            item.options["hccl_timeout"],
                            item.options["op_wait_timeout"],
                        )
                    )
                assert len(versions) == 1, versions
            else:
                result = await client.resolve("atlas-a2", workdir=f"/job/{i}")
                assert result.ok
                seen.append(
                    (
                        result.policy_version,
                        result.options["hccl_timeout"],
                        result.options["op_wait_timeout"],
                    )
                )

        for start in range(0, rounds, 50):
            await asyncio.gather(*(one(i) for i in range(start, start + 50)))
    return seen


def test_reloads_under_load_fail_no_call_and_never_mix_policies(tmp_path: Path) -> None:
    policy_file = tmp_path / "policy.toml"
    policy_file.write_text(POLICY_A)
    store = PolicyStore(policy_file)
    store.load_initial()
    settings = ServerSettings(port=0, policy=policy_file, grace_seconds=2.0, cache_entries=0)
    stop = threading.Event()
    with ThreadServer(settings, store=store) as server:
        swapper = threading.Thread(target=_swap_files, args=(policy_file, store, stop))
        swapper.start()
        try:
            seen = asyncio.run(_load(server.target, 400))
        finally:
            stop.set()
            swapper.join(timeout=30)
    assert len(seen) == 400 // 5 * 8 + 400 * 4 // 5
    for version, hccl, wait in seen:
        assert EXPECTED[version] == (hccl, wait), (version, hccl, wait)
    assert {v for v, _, _ in seen} <= set(EXPECTED)
    assert store.status().reload_failures > 0


def test_a_good_reload_after_a_refused_one_clears_the_refusal(tmp_path: Path) -> None:
    """GetPolicy and the status say the refused file's hash only while it is the one refused."""
    policy_file = tmp_path / "policy.toml"
    policy_file.write_text(POLICY_A)
    store = PolicyStore(policy_file)
    store.load_initial()
    policy_file.write_text("garbage [")
    store.reload()
    assert store.status().refused_version != "" and store.status().last_reload_error != ""
    policy_file.write_text("[profiles.default.defaults]\nhccl_timeout = 1800\n")
    store.reload()
    status = store.status()
    assert status.refused_version == "" and status.last_reload_error == ""
    assert status.version == parse_policy(policy_file.read_text(), "p").version
