#!/usr/bin/env bash
# The whole pipeline end to end on local defaults, on a fresh Debian 12 machine (root):
#   bootstrap -> local torch base -> build + smoke-test the cpu variant -> squash it to a .sqsh
#   -> stage its jobs for Pyxis (what a real cluster runs) and for the host runtime
#   -> run the host-runtime jobs on a local single-node Slurm and wait for their verdicts.
# Pyxis and enroot are not available on such a machine, so the Pyxis jobs are staged, not run;
# on a cluster, `invoke stage-jobs --variant cpu --submit --wait` runs them from the .sqsh.
# Output lands in ./out (override with CLUSTERPROBE_QUICKSTART_OUT).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/bootstrap.sh

OUT="${CLUSTERPROBE_QUICKSTART_OUT:-$PWD/out}"
INVOKE=(.venv/bin/invoke)

"${INVOKE[@]}" local-base
"${INVOKE[@]}" build --variant cpu
"${INVOKE[@]}" squash --variant cpu --out "$OUT/apps"
"${INVOKE[@]}" stage-jobs --variant cpu --out "$OUT/jobs-pyxis" --squash-dir "$OUT/apps" --nodes 1

# A single-node Slurm on this machine (the test rig's daemons, on their own ports).
conf_line=$(.venv/bin/python -m tests.rig.slurm up)
export "${conf_line?}"
echo "==> local Slurm up (${conf_line}); stop it with: .venv/bin/python -m tests.rig.slurm down"

"${INVOKE[@]}" stage-jobs --variant cpu --runtime host --out "$OUT/jobs-host" --nodes 1 --partition rig \
  --epochs 1 --max-bytes 1M --submit --wait --wait-timeout 600
echo "==> done: .sqsh in $OUT/apps, Pyxis jobs in $OUT/jobs-pyxis/cpu, host jobs and their logs in $OUT/jobs-host/cpu"
