"""scheduler.py — the connector's scheduler side: which chunks of a request
kvtierd holds (a LOOKUP, leased until loaded), which GPU blocks they go to,
and which chunks a finished request saves. Requests are duck-typed vLLM
Requests: request_id, num_tokens, block_hashes, cache_salt,
kv_transfer_params, num_publishable_block_hashes.

Rules kept here: whole chunks only; never the prompt's last token (vLLM
must compute at least one); a request's answer is cached, so asking again
is free of side effects; a request whose load finished is never offered a
load again until it is preempted (vLLM asks again after a load only when
blocks of it failed, and asking kvtierd again would fail the same way:
the request would never run); only publishable blocks are saved."""

import logging
from dataclasses import dataclass

from .keys import chunk_block_ids, chunk_keys
from .link import Link
from .meta import LoadSpec, SaveSpec, StepMeta

log = logging.getLogger("kvtier.connector")


@dataclass
class RequestState:
    first_chunk: int = 0        # chunk where loading starts (num_computed_tokens, chunk-aligned)
    hit_chunks: int = 0         # chunks kvtierd holds from first_chunk on
    lease_id: int = 0
    load: LoadSpec = None       # set by update_state_after_alloc, sent with the next step
    loading: bool = False       # sent, not reported finished
    loaded: bool = False        # a load of it finished: vLLM asks again only if it failed
    skip_save: bool = False
    answered_for: int = -1      # num_computed_tokens the answer was for


class SchedulerSide:
    def __init__(self, cfg, geometry, open_client):
        """open_client(): a kvtier.Client of the namespace in the scheduler role; called at
        start (its error stops the connector) and again after kvtierd was lost."""
        self.cfg = cfg
        self.geo = geometry
        self.link = Link(open_client, cfg.reconnect_ms, "scheduler")
        self.link.open()
        self.chunk_tokens = cfg.chunk_blocks * geometry.block_size
        self.requests = {}
        self.saves = []
        self.cancelled = []
        self.aborted = []
        self.stats = {"lookups": 0, "hit_tokens": 0, "lookup_errors": 0}

    def _state(self, req_id):
        return self.requests.setdefault(req_id, RequestState())

    @staticmethod
    def _params(request):
        return getattr(request, "kv_transfer_params", None) or {}

    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        """(tokens kvtierd can supply beyond num_computed_tokens, whether the load is async)."""
        st = self._state(request.request_id)
        params = self._params(request)
        st.skip_save = bool(params.get("kvtier_skip_save", False))
        if params.get("kvtier_skip_load", False):
            return 0, False
        if st.loaded:  # asked again after its load: blocks of it failed, vLLM recomputes them
            return 0, False
        if st.answered_for == num_computed_tokens:
            return st.hit_chunks * self.chunk_tokens, st.hit_chunks > 0
        self._forget_lease(st)
        st.answered_for = num_computed_tokens
        st.hit_chunks = 0
        if num_computed_tokens % self.chunk_tokens:
            return 0, False  # a chunk is loaded whole: only from a chunk boundary
        n = self.cfg.chunk_blocks
        whole = len(request.block_hashes) // n
        below_last = (request.num_tokens - 1) // self.chunk_tokens  # the last token is computed
        end = min(whole, below_last)
        st.first_chunk = num_computed_tokens // self.chunk_tokens
        if end <= st.first_chunk:
            return 0, False
        keys = chunk_keys(request.block_hashes, n, st.first_chunk, end)
        try:
            r = self._lookup(keys)
        except OSError as e:  # kvtierd down: nothing hits, vLLM computes
            self.stats["lookup_errors"] += 1
            log.warning("kvtier: lookup failed (%s); computing the prefix", e)
            return 0, False
        self.stats["lookups"] += 1
        st.hit_chunks, st.lease_id = r.hits, r.lease_id
        return st.hit_chunks * self.chunk_tokens, st.hit_chunks > 0

    def update_state_after_alloc(self, request, block_ids, num_external_tokens):
        """block_ids: the request's GPU block ids (its one KV cache group), computed ones first."""
        st = self._state(request.request_id)
        if num_external_tokens <= 0 or not st.hit_chunks:
            return
        chunks = min(st.hit_chunks, num_external_tokens // self.chunk_tokens)
        end = st.first_chunk + chunks
        n = self.cfg.chunk_blocks
        st.load = LoadSpec(request.request_id, chunk_keys(request.block_hashes, n,
                                                          st.first_chunk, end),
                           chunk_block_ids(block_ids, n, st.first_chunk, end))
        self.stats["hit_tokens"] += chunks * self.chunk_tokens

    def build_connector_meta(self, preempted_req_ids=()):
        """The step's loads and saves; preempted requests' transfers are cancelled."""
        meta = StepMeta()
        for req_id in preempted_req_ids:
            self._cancel(req_id)
        for st in self.requests.values():
            if st.load is not None:
                meta.loads.append(st.load)
                st.load = None
                st.loading = True
        meta.saves, self.saves = self.saves, []
        meta.cancelled, self.cancelled = self.cancelled, []
        meta.aborted, self.aborted = self.aborted, []
        return meta

    def update_connector_output(self, finished_recving=()):
        """Loads the workers reported done: their leases go back."""
        for req_id in finished_recving or ():
            st = self.requests.get(req_id)
            if st:
                st.loading, st.loaded = False, True
                self._forget_lease(st)

    def request_finished(self, request, block_ids):
        """(True when a save is queued and the blocks must wait for it, None)."""
        st = self.requests.pop(request.request_id, RequestState())
        self._forget_lease(st)
        if st.load is not None:  # never sent: nothing touches its blocks
            return False, None
        if st.loading:
            # Aborted with its load out: the blocks stay until the workers say the load is
            # over (as a finished save); nothing of it is saved.
            self.aborted.append(request.request_id)
            return True, None
        if st.skip_save or self._params(request).get("kvtier_skip_save", False):
            return False, None
        n = self.cfg.chunk_blocks
        publishable = getattr(request, "num_publishable_block_hashes", None)
        if publishable is None:
            publishable = len(request.block_hashes)
        chunks = min(publishable, len(block_ids)) // n
        first_hit, end_hit = st.first_chunk, st.first_chunk + st.hit_chunks
        todo = [c for c in range(chunks) if not first_hit <= c < end_hit]  # hits are there
        if not todo:
            return False, None
        keys, ids = [], []
        for c in todo:
            keys += chunk_keys(request.block_hashes, n, c, c + 1)
            ids += chunk_block_ids(block_ids, n, c, c + 1)
        self.saves.append(SaveSpec(request.request_id, keys, ids))
        return True, None

    def _cancel(self, req_id):
        st = self.requests.get(req_id)
        if st is None:
            return
        if st.loading or st.load is not None:
            self.cancelled.append(req_id)
        st.load = None
        st.loading = st.loaded = False
        st.answered_for = -1  # asked again when it is rescheduled
        self._forget_lease(st)

    @property
    def client(self):
        """The lookup client; None while kvtierd is lost."""
        return self.link.conn

    def _lookup(self, keys):
        """One LOOKUP; a connection found dead (kvtierd restarted since its last use) is
        replaced and the lookup asked once more on the new one."""
        return self.link.run(lambda c: c.lookup(keys, lease_ms=self.cfg.lease_ms),
                             lost=lambda e: True, on_lost=self._lost)

    def _lost(self, e=None):
        if self.link.conn is not None:
            self.link.drop()
            for st in self.requests.values():
                st.lease_id = 0  # gone with the connection

    def close(self):
        self.link.drop()

    def _forget_lease(self, st):
        if st.lease_id and self.client is not None:
            try:
                self.client.release(st.lease_id)
            except OSError:
                pass  # expired, or kvtierd restarted: the lease is gone either way
        st.lease_id = 0
