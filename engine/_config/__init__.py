"""Options and names: every option an attrs field (``options``), loaded from TOML and
dotted overrides (``settings``), and the id registries of envs, tasksets and harnesses
(``registry``). Depends on nothing of taketurns but the error tree."""
