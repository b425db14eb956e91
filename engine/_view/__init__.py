"""``taketurns view``: a local, read-only web app over run directories (``server``),
live while evals write them."""
