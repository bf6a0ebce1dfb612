"""The test rig: real daemons started by the tests themselves (and so by .ci/run).

Docker engine, a local torch base image, an htpasswd registry on loopback, the ECR API (moto),
and Slurm (single node, and a two-node cluster of containers). Each piece starts only if it is
not already running, and what is expensive to make (images) is cached by tag between runs.
"""
