"""clusterprobe: build, squash and stage PyTorch DDP checks and collective benchmarks for
Slurm clusters with Pyxis and Enroot. The package never imports invoke; tasks.py is a thin CLI."""

__version__ = "0.1.0"
