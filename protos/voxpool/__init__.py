"""voxpool API package: protos/voxpool/<version>/."""
