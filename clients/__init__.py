"""voxpool clients package."""
