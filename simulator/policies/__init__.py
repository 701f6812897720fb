"""The serving policies: the contract in base.py, the registry in registry.py, one file per
policy, and the kit they share in files named for it (drafting costs live in simulator.cost)."""
