"""specsim reports package."""
