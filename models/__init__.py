"""voxpool models package."""
