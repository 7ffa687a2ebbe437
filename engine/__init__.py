"""voxpool engine package."""
