"""The `voxpool` command (serve, say, normalize, voices, cache, gateway): the top of the import graph, over every package."""
