"""specsim hardware package."""
