"""meta.py — what the scheduler side hands every worker each step
(vLLM's KVConnectorMetadata carries a StepMeta): the loads to start, the
saves to make, the requests whose transfers are cancelled."""

from dataclasses import dataclass, field


@dataclass
class LoadSpec:
    req_id: str
    keys: list            # kvtier keys, one per chunk
    block_ids: list       # GPU block ids, chunk_blocks per key
    retried: bool = False  # made again after its connection was found closed


@dataclass
class SaveSpec:
    req_id: str
    keys: list
    block_ids: list
    retried: bool = False


@dataclass
class StepMeta:
    loads: list = field(default_factory=list)
    saves: list = field(default_factory=list)
    cancelled: list = field(default_factory=list)   # preempted: their loads stop touching blocks
    aborted: list = field(default_factory=list)     # finished while loading: report when done
