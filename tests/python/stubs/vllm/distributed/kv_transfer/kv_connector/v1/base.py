"""Stand-in for vllm/distributed/kv_transfer/kv_connector/v1/base.py (vLLM
0.32): the roles, the metadata base, and the KVConnectorBase_V1 members
kvtier uses or overrides, with vLLM's parameter names (abstract ones raise).
tests/vllm/test_conformance.py checks each member, its binding and its
parameters against the installed vLLM, so drift fails there."""

import enum


class KVConnectorRole(enum.Enum):
    SCHEDULER = 0
    WORKER = 1


class KVConnectorMetadata:
    pass


class KVConnectorBase_V1:
    def __init__(self, vllm_config, role, kv_cache_config):
        assert vllm_config.kv_transfer_config is not None, "kv_transfer_config must be set"
        self._vllm_config = vllm_config
        self._role = role
        self._kv_cache_config = kv_cache_config
        self._kv_transfer_config = vllm_config.kv_transfer_config
        self._connector_metadata = None

    @property
    def role(self):
        return self._role

    # --- worker side ---
    def bind_connector_metadata(self, connector_metadata):
        self._connector_metadata = connector_metadata

    def clear_connector_metadata(self):
        self._connector_metadata = None

    def _get_connector_metadata(self):
        return self._connector_metadata

    def register_kv_caches(self, kv_caches):
        return None

    def start_load_kv(self, forward_context, **kwargs):
        raise NotImplementedError

    def wait_for_layer_load(self, layer_name):
        raise NotImplementedError

    def save_kv_layer(self, layer_name, kv_layer, attn_metadata, **kwargs):
        raise NotImplementedError

    def wait_for_save(self):
        raise NotImplementedError

    def get_finished(self, finished_req_ids):
        return None, None

    def get_block_ids_with_load_errors(self):
        return set()

    def handle_preemptions(self, kv_connector_metadata):
        return None

    def shutdown(self):
        return None

    def get_kv_connector_stats(self):
        return None

    @classmethod
    def build_kv_connector_stats(cls, data=None):
        return None

    @classmethod
    def build_prom_metrics(cls, vllm_config, metric_types, labelnames, per_engine_labelvalues):
        return None

    @classmethod
    def get_required_kvcache_layout(cls, vllm_config):
        return None

    @classmethod
    def requires_piecewise_for_cudagraph(cls, extra_config):
        return False

    # --- scheduler side ---
    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        raise NotImplementedError

    def update_state_after_alloc(self, request, blocks, num_external_tokens):
        raise NotImplementedError

    def build_connector_meta(self, scheduler_output):
        raise NotImplementedError

    def request_finished(self, request, block_ids):
        return False, None

    def on_new_request(self, request):
        return None

    def update_connector_output(self, connector_output):
        return None

    def take_events(self):
        return ()

    def bind_gpu_block_pool(self, gpu_block_pool):
        return None

    def has_pending_push_work(self):
        return False

    def reset_cache(self):
        return None

    def get_finished_count(self):
        return None


class SupportsHMA:
    """The hybrid-model mixin: connectors of several KV cache groups (kvtier refuses those)."""

    def request_finished_all_groups(self, request, block_ids):
        raise NotImplementedError
