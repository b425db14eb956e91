"""The HTTP face of the model boundary: the OpenAI chat-completions dialect, the
interception server out-of-process harnesses talk to, and ``serve`` (the built-in model
over HTTP). Hypercorn + quart-trio; imported only when a harness or command needs it."""
