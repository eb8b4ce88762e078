"""The server's policy store: file watching (ConfigMap symlink swaps), SIGHUP, last good kept."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from pathlib import Path

from npu_resolver import PolicyLayer
from npu_resolver_client import ResolverClient
from npu_resolver_server import PolicyStore
from tests._server import ProcessServer


class FakePolicy:
    """The smallest PolicyLike: a version read from the file, no layers."""

    def __init__(self, version: str) -> None:
        self._version = version

    @property
    def version(self) -> str:
        return self._version

    def layer(self, profile: str, product: str) -> PolicyLayer | None:
        return PolicyLayer(locked={}, defaults={}) if profile == "default" else None

    def profile_names(self) -> tuple[str, ...]:
        return ("default",)


def fake_loader(path: Path) -> FakePolicy:
    text = path.read_text().strip()
    if not text.startswith("v"):
        raise ValueError(f"{path}: line 1: expected a version, got {text[:20]!r}")
    return FakePolicy(text)


def _configmap(root: Path, name: str, content: str) -> None:
    """Lay out a folder the way Kubernetes mounts a ConfigMap, and swap `..data` atomically."""
    folder = root / name
    folder.mkdir()
    (folder / "policy.toml").write_text(content)
    tmp = root / "..data_tmp"
    tmp.symlink_to(name)
    os.replace(tmp, root / "..data")
    if not (root / "policy.toml").is_symlink():
        (root / "policy.toml").symlink_to("..data/policy.toml")


def test_configmap_swap_is_seen_and_bad_content_keeps_last_good(tmp_path: Path) -> None:
    _configmap(tmp_path, "..2024_01", "v1")
    changes: list[str] = []
    store = PolicyStore(tmp_path / "policy.toml", loader=fake_loader)
    store.add_listener(lambda s: changes.append(s.version))
    store.load_initial()
    assert store.version == "v1" and store.check_file() is None

    _configmap(tmp_path, "..2024_02", "v2")
    outcome = store.check_file()
    assert outcome is not None and outcome.changed and store.version == "v2"

    _configmap(tmp_path, "..2024_03", "garbage")
    outcome = store.check_file()
    assert outcome is not None and not outcome.changed and "line 1" in outcome.error
    assert store.version == "v2"
    status = store.status()
    assert status.last_reload_error and status.refused_version and status.reload_failures == 1
    assert store.check_file() is None  # the same bad file is not retried every second

    _configmap(tmp_path, "..2024_04", "v3")
    assert store.check_file() is not None
    assert store.version == "v3" and store.status().last_reload_error == ""
    assert changes == ["v1", "v2", "v2", "v3"]


def test_a_refused_file_made_readable_is_read_again(tmp_path: Path) -> None:
    """A file replaced by one the server may not read is refused; `chmod` then changes only
    the file's ctime, and the watcher must see that change too, not wait for a SIGHUP."""
    policy = tmp_path / "policy.toml"
    policy.write_text("v1")
    readable = {"now": True}

    def loader(path: Path) -> FakePolicy:
        if not readable["now"]:
            raise PermissionError(13, "Permission denied", str(path))
        return fake_loader(path)

    store = PolicyStore(policy, loader=loader)
    store.load_initial()
    replacement = tmp_path / "new.toml"
    replacement.write_text("v2")
    os.replace(replacement, policy)
    readable["now"] = False
    outcome = store.check_file()
    assert outcome is not None and "Permission denied" in outcome.error
    assert store.check_file() is None  # the same refused file is not read every poll
    readable["now"] = True
    stat = policy.stat()
    os.chmod(policy, 0o600)  # ctime moves; mtime, size and inode do not
    os.chmod(policy, stat.st_mode)
    assert policy.stat().st_mtime_ns == stat.st_mtime_ns
    outcome = store.check_file()
    assert outcome is not None and outcome.changed and store.version == "v2"


async def test_watcher_task_reloads(tmp_path: Path) -> None:
    policy_file = tmp_path / "policy.toml"
    policy_file.write_text("v1")
    store = PolicyStore(policy_file, loader=fake_loader)
    store.load_initial()
    store.start_watching(0.02)
    try:
        policy_file.write_text("v22")  # a different size, whatever the clock's resolution
        for _ in range(200):
            if store.version == "v22":
                break
            await asyncio.sleep(0.01)
        assert store.version == "v22"
    finally:
        await store.stop_watching()


def test_sighup_reloads_and_a_bad_file_is_reported(tmp_path: Path) -> None:
    policy_file = tmp_path / "policy.toml"
    policy_file.write_text("[profiles.default.defaults]\nop_debug_level = 0\n")
    with ProcessServer(["--policy", str(policy_file)]) as server:
        with ResolverClient(server.target) as client:
            good = client.get_policy().policy_version
            assert good
            policy_file.write_text("[profiles.default.defaults]\nno_such_option = 1\n")
            server.signal(signal.SIGHUP)
            server.wait_for("policy_reload_failed")
            status = client.get_policy()
            assert status.policy_version == good and "no_such_option" in status.last_reload_error
            assert client.resolve("atlas-a2").policy_version == good
        server.signal(signal.SIGTERM)
        assert server.wait() == 0


def test_a_loader_defect_keeps_the_last_good_policy_and_is_counted(tmp_path: Path) -> None:
    """Not only a bad file: an exception the loader was never meant to raise is a failed
    reload too (counted, reported by GetPolicy), never a dead watcher or a lost policy."""
    policy_file = tmp_path / "policy.toml"
    policy_file.write_text("v1")

    def loader(path: Path) -> FakePolicy:
        text = path.read_text()
        if text == "defect":
            raise TypeError("unhashable type: 'dict'")
        return fake_loader(path)

    store = PolicyStore(policy_file, loader=loader)
    store.load_initial()
    policy_file.write_text("defect")
    outcome = store.check_file()
    assert outcome is not None and not outcome.changed
    assert "TypeError" in outcome.error and store.version == "v1"
    assert store.status().reload_failures == 1


def test_a_worker_lost_while_a_bad_policy_is_on_disk_does_not_stop_the_server(
    tmp_path: Path,
) -> None:
    """The running workers refused the bad file and keep the last good policy; a worker that
    dies then cannot start with that file, so its restart is retried while the other serves,
    and succeeds once the file is fixed."""
    policy_file = tmp_path / "policy.toml"
    good = "[profiles.default.defaults]\nhccl_timeout = 3600\n"
    policy_file.write_text(good)
    with ProcessServer(["--workers", "2", "--policy", str(policy_file)]) as server:
        serving = server.wait_for("serving", 2)
        policy_file.write_text("bad = [[[")
        server.signal(signal.SIGHUP)
        server.wait_for("policy_reload_failed", 2)
        os.kill(serving[0]["pid"], signal.SIGKILL)
        failed = server.wait_for("worker_restart_failed")
        assert failed[0]["running_workers"] == 1
        # A restart's refusal is the log's alone: no plain lines among the JSON ones.
        assert [line for line in server.raw if not line.startswith("{")] == []
        with ResolverClient(server.target) as client:
            assert client.resolve("atlas-a2").options["hccl_timeout"] == 3600
        assert server.proc is not None and server.proc.poll() is None
        policy_file.write_text(good)
        server.wait_for("serving", 3, timeout=30)
        server.signal(signal.SIGTERM)
        assert server.wait() == 0


async def test_reloads_asked_while_one_runs_share_the_next(tmp_path: Path) -> None:
    """A storm of ReloadPolicy calls or SIGHUPs: those asked while a load runs share one more
    load, which reads the file as it is after they asked; not one load each."""
    policy = tmp_path / "policy.toml"
    policy.write_text("v1")
    loads: list[str] = []
    gate = asyncio.Event()
    loop = asyncio.get_running_loop()

    reading = threading.Event()

    def slow_loader(path: Path) -> FakePolicy:
        text = path.read_text()
        reading.set()
        asyncio.run_coroutine_threadsafe(gate.wait(), loop).result(10)
        loads.append(text)
        return FakePolicy(text)

    store = PolicyStore(policy, loader=fake_loader)
    store.load_initial()
    store._loader = slow_loader
    first = asyncio.ensure_future(store.reload_async())
    assert await asyncio.to_thread(reading.wait, 10)  # the first load has read, held at the gate
    policy.write_text("v2")  # changed after the first load began
    storm = [asyncio.ensure_future(store.reload_async()) for _ in range(40)]
    await asyncio.sleep(0.05)
    gate.set()
    outcomes = await asyncio.gather(first, *storm)
    assert loads == ["v1", "v2"]  # the running one, and one shared by the 40
    assert outcomes[0].version == "v1"
    assert {o.version for o in outcomes[1:]} == {"v2"}  # each read the file after asking
    assert store.version == "v2"
    again = await store.reload_async()  # nothing runs now: a load of its own
    assert again.version == "v2" and len(loads) == 3
