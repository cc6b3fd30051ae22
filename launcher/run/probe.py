"""Proof that the switch reaches megatron: count first-group all-gathers from start_param_sync.

Instruments the instance, never megatron's source. The DistributedOptimizer calls the *adapter's*
`start_param_sync` attribute (a copy of the engine's bound method taken at construction), and that
method looks up the engine's `all_gather_and_wait_parameters_ready` on each call, so both are
wrapped: every all-gather issued while start_param_sync runs is one first-group prefetch.
"""


class PrefetchCounter:
    """Counts all-gathers that M-FSDP issues from inside start_param_sync."""

    def __init__(self, adapter):
        self.count = 0
        self._inside = False
        engine = adapter.module
        start_param_sync = adapter.start_param_sync
        all_gather = engine.all_gather_and_wait_parameters_ready

        def counted_start_param_sync(*args, **kwargs):
            self._inside = True
            try:
                return start_param_sync(*args, **kwargs)
            finally:
                self._inside = False

        def counted_all_gather(*args, **kwargs):
            if self._inside:
                self.count += 1
            return all_gather(*args, **kwargs)

        adapter.start_param_sync = counted_start_param_sync
        engine.all_gather_and_wait_parameters_ready = counted_all_gather
