"""specsim simulator package."""
