"""``taketurns replay``: recorded episodes re-driven with their recorded replies."""
