"""voxpool tests.service package."""
