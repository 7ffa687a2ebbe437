"""voxpool service package."""
