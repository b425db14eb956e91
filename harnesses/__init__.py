"""Built-in harnesses. Each registers through the ``taketurns.harnesses`` entry-point
group and uses only the public modules (``taketurns``, ``taketurns.harness``, ...),
exactly as a plugin would."""
