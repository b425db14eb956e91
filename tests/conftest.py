"""Suite-wide set-up: tests that interrupt a child process rely on SIGINT reaching it.

A shell starts a background job (``pytest ... &`` with job control off, as `nohup`
runs do) with SIGINT ignored, and an ignored signal stays ignored across ``exec``: every
``taketurns`` the tests start would then shrug off the SIGINT they send, and Python
would not install its own handler. Restoring Python's handler here gives every child
the default disposition again.
"""

from __future__ import annotations

import signal

if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
