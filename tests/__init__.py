"""voxpool tests package."""
