"""specsim calibrate package."""
