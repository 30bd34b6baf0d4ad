"""kvtier.connector — the vLLM connector's logic, importing nothing of vLLM
(or torch): configuration, keys and namespaces, the scheduler side and the
worker side, and the per-step metadata between them. kvtier.vllm is the
thin class vLLM loads, over these."""

from .config import ConnectorConfig, Geometry
from .meta import LoadSpec, SaveSpec, StepMeta
from .scheduler import SchedulerSide
from .worker import WorkerSide

__all__ = ["ConnectorConfig", "Geometry", "LoadSpec", "SaveSpec", "StepMeta", "SchedulerSide",
           "WorkerSide"]
