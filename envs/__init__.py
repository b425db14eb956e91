"""Built-in environments. Each registers through the ``taketurns.envs`` entry-point
group and uses only the public ``engine`` API, exactly as a plugin would."""
