"""Reference agent programs run out of process by the ``program`` and ``stateful``
harnesses. They know nothing of taketurns: they read ``OPENAI_BASE_URL`` and
``OPENAI_API_KEY`` like any OpenAI client, and exchange JSON with the harness: in
files, or (``chat --serve``) as lines on stdin and stdout, each line naming the
endpoint of the rollout it belongs to."""
