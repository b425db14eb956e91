"""The HTTP face of the model boundary: the wire dialects (``dialect``: OpenAI chat
completions, OpenAI Responses, Anthropic Messages, Gemini; registered by id in the
``taketurns.dialects`` entry-point group, ``dialects``), the interception server
out-of-process harnesses talk to (and ``served``: their base class), and ``serve``
(the built-in model over HTTP, in every dialect). Hypercorn + quart-trio; imported
only when a harness or command needs it."""
