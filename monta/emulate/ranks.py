"""Where each rank of an emulated job lives (node, address, interface) and the environment it gets.

The environment is torchrun's (MASTER_ADDR/PORT, RANK, WORLD_SIZE, LOCAL_RANK, ...) plus MONTA_*.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class RankInfo:
    rank: int
    node: int
    local_rank: int
    host: str
    addr: str  # the address gloo binds to (the node NIC's, or 127.0.0.1 unshaped)
    ifname: str

    def to_dict(self) -> dict:
        return asdict(self)


def layout(nodes: int, gpus_per_node: int, addrs: list[str], hosts: list[str], ifname: str) -> list[RankInfo]:
    return [
        RankInfo(rank=n * gpus_per_node + g, node=n, local_rank=g, host=hosts[n], addr=addrs[n], ifname=ifname)
        for n in range(nodes)
        for g in range(gpus_per_node)
    ]


def rank_env(
    info: RankInfo, nodes: int, gpus_per_node: int, node_addrs: list[str], master_port: int, emulated: bool
) -> dict[str, str]:
    env = {
        "MASTER_ADDR": node_addrs[0],
        "MASTER_PORT": str(master_port),
        "RANK": str(info.rank),
        "WORLD_SIZE": str(nodes * gpus_per_node),
        "LOCAL_RANK": str(info.local_rank),
        "LOCAL_WORLD_SIZE": str(gpus_per_node),
        "GROUP_RANK": str(info.node),
        "NODE_RANK": str(info.node),
        "ROLE_RANK": str(info.rank),
        "GLOO_SOCKET_IFNAME": info.ifname,
        "MONTA_NODE": str(info.node),
        "MONTA_NODES": str(nodes),
        "MONTA_GPUS_PER_NODE": str(gpus_per_node),
        "MONTA_HOST": info.host,
        "MONTA_BIND_ADDR": info.addr,
        "MONTA_NODE_ADDRS": ",".join(node_addrs),
        "MONTA_EMULATED": "1" if emulated else "0",  # 0: the unshaped 127.0.0.1 fallback
    }
    return env
