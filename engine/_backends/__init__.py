"""Where episodes run besides this trio loop: local worker processes and Ray workers,
each playing its shard of the (task, rollout) pairs; exactly-once bookkeeping in
``shards``."""
