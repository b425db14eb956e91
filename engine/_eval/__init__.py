"""How a task becomes an episode: ``Env`` and ``Taskset``, ``run_episode``, the plan an
eval builds before its first episode (clients, harnesses, limiters per role), the loop
that plays (task, rollout) pairs, and the asyncio host for asyncio-only libraries."""
