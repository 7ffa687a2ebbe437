"""voxpool tests.engine package."""
