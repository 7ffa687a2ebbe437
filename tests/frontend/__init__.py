"""voxpool tests.frontend package."""
