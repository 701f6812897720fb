"""specsim workloads package."""
