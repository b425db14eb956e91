"""Built-in harnesses. Each registers through the ``taketurns.harnesses`` entry-point
group and uses only the public ``engine`` API, exactly as a plugin would."""
