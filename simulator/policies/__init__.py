"""The serving policies: the contract in base.py, the registry in registry.py, one file per
policy (the ones registry.py imports), and the kit they share in files named for what they
hold: chain_acceptance.py, draft_control.py, token_text.py, tree_acceptance.py,
adaptive_controllers.py (drafting costs live in simulator.cost)."""
