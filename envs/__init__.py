"""Built-in environments. Each registers through the ``taketurns.envs`` entry-point
group and uses only the public modules (``taketurns``, ``taketurns.harness``, ...),
exactly as a plugin would."""
