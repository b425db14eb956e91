"""What a model reads and writes, and the clients that make model calls: messages and
their OpenAI wire shape, the ``ModelClient`` interface, the built-in model (with its
shared latency timer) and the OpenAI-compatible HTTP client. Below the exchange: it
knows nothing of sessions or traces."""
