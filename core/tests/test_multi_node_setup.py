"""What a multi-node run and a GPU run set up, checked without either: gloo's network interface
(``GLOO_SOCKET_IFNAME``), the tensor-parallel group's timeout, and the once-only warning when a
windowed vision tower (Qwen2.5-VL) runs on sdpa on a GPU."""

from __future__ import annotations

import logging
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from videorl import devices, parallel
from videorl.parallel import COLLECTIVE_TIMEOUT, interface_of, set_gloo_interface

INTERFACES = [("lo", "127.0.0.1"), ("eth0", "10.1.2.3"), ("ib0", "192.168.7.9")]


def test_gloo_binds_to_the_interface_towards_the_master(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(parallel, "_ipv4_interfaces", lambda: INTERFACES)
    monkeypatch.setattr(parallel, "route_address", lambda addr: "192.168.7.9")  # the route goes via ib0
    env: dict[str, str] = {"MASTER_ADDR": "192.168.7.1"}
    assert set_gloo_interface(env) == "ib0" and env["GLOO_SOCKET_IFNAME"] == "ib0"
    # the user's choice stays; a rendezvous on the loopback (one host) needs none; no master, nothing
    mine = {"MASTER_ADDR": "192.168.7.1", "GLOO_SOCKET_IFNAME": "eth0"}
    assert set_gloo_interface(mine) is None and mine["GLOO_SOCKET_IFNAME"] == "eth0"
    local = {"MASTER_ADDR": "127.0.0.1"}
    assert set_gloo_interface(local) is None and "GLOO_SOCKET_IFNAME" not in local
    assert set_gloo_interface({}) is None
    # an address no interface holds (or the loopback's): leave gloo's default
    assert interface_of("10.9.9.9", INTERFACES) is None and interface_of("127.0.0.1", INTERFACES) is None


def test_gloo_interface_of_this_hosts_own_address() -> None:
    """The real look-up on this host (no packet leaves it): its first non-loopback IPv4 address."""
    own = [(name, addr) for name, addr in parallel._ipv4_interfaces() if name != "lo"]
    if not own:
        pytest.skip("no IPv4 interface besides the loopback")
    env = {"MASTER_ADDR": own[0][1]}
    assert set_gloo_interface(env) == own[0][0] == env["GLOO_SOCKET_IFNAME"]


def test_the_tensor_parallel_group_waits_as_long_as_the_default_group(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made: list[dict[str, Any]] = []
    fake = SimpleNamespace(new_group=lambda ranks, timeout: made.append({"ranks": ranks, "timeout": timeout}))
    monkeypatch.setattr(torch.distributed, "new_group", fake.new_group)
    parallel.new_group(range(2, 4))
    assert made == [{"ranks": [2, 3], "timeout": COLLECTIVE_TIMEOUT}]
    assert timedelta(minutes=30) < COLLECTIVE_TIMEOUT  # torch's default for a new group


def _qwen2_5_vl(attention: str | None) -> Any:
    from transformers import Qwen2_5_VLConfig

    config: Any = Qwen2_5_VLConfig()
    config.vision_config._attn_implementation = attention
    return SimpleNamespace(config=config)


def test_a_windowed_vision_tower_on_sdpa_warns_once_on_a_gpu(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from transformers import Qwen3VLConfig

    monkeypatch.setattr(devices, "_WARNED", set())
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with caplog.at_level(logging.WARNING, logger="videorl.devices"):
        devices.warn_windowed_vision_on_sdpa(_qwen2_5_vl("sdpa"))  # CPU: nothing faster to install
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        devices.warn_windowed_vision_on_sdpa(_qwen2_5_vl("flash_attention_2"))
        devices.warn_windowed_vision_on_sdpa(SimpleNamespace(config=Qwen3VLConfig()))  # no windows
        assert not caplog.records
        devices.warn_windowed_vision_on_sdpa(_qwen2_5_vl(None))  # transformers' default: sdpa
        devices.warn_windowed_vision_on_sdpa(_qwen2_5_vl("sdpa"))
    assert len(caplog.records) == 1
    assert "flash-attn" in caplog.records[0].getMessage()
