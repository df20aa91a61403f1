"""The launch the emulator's launcher hands its supervisor (``monta.emulate.launch_spec.LaunchSpec``): typed
on both sides, written as the same JSON keys as the dict it replaced, read back strictly."""

from __future__ import annotations

import json

import pytest

from monta.emulate.launch_spec import LaunchSpec
from monta.emulate.topology import Topology

# The keys the launcher wrote when the launch was a dict (and the supervisor read): the JSON keeps them.
KEYS = [
    "mode", "nodes", "gpus_per_node", "topology", "argv", "timeout_s", "stall_s", "preload", "log_dir",
    "result_path", "master_port",
]  # fmt: skip


def _spec(tmp_path, **kw) -> LaunchSpec:
    fields = dict(
        mode="netns",
        nodes=2,
        gpus_per_node=4,
        topology=Topology.preset("unshaped"),
        argv=("python", "-m", "x"),
        timeout_s=60.0,
        preload=("torch",),
        log_dir=str(tmp_path),
        result_path=str(tmp_path / "supervisor-result.json"),
        master_port=29500,
    )
    return LaunchSpec(**(fields | kw))


def test_the_launch_round_trips_through_the_same_json_keys(tmp_path):
    spec = _spec(tmp_path)
    spec.write(tmp_path / "spec.json")
    data = json.loads((tmp_path / "spec.json").read_text())
    assert list(data) == KEYS
    assert data["topology"] == Topology.preset("unshaped").to_dict() and data["argv"] == ["python", "-m", "x"]
    back = LaunchSpec.read(tmp_path / "spec.json")
    assert back == spec and back.emulated and not _spec(tmp_path, mode="plain").emulated


def test_an_unknown_or_missing_key_is_a_one_line_error(tmp_path):
    data = _spec(tmp_path).to_dict()
    with pytest.raises(ValueError, match=r"^LaunchSpec: unknown setting gpus \(known: .*\); remove it$"):
        LaunchSpec.from_dict(data | {"gpus": 8})
    del data["master_port"]
    with pytest.raises(ValueError, match="^LaunchSpec: missing master_port; the launcher writes every one$"):
        LaunchSpec.from_dict(data)
    with pytest.raises(ValueError, match="mode='ns'; use one of netns, plain"):
        _spec(tmp_path, mode="ns")
