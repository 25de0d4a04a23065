"""`corral run`: srun under corral's name, for running a command as every task of a job.

It is corral's srun itself (corral.slurm.srun.main), not a copy: the same options, layout,
environment, output relaying and exit status; only --help speaks as `corral run`. `corral submit`
(sbatch) is the command whose script runs once."""
from __future__ import annotations

from collections.abc import Sequence

HELP = """\
Usage: corral run [OPTIONS] [--] COMMAND [ARGS...]

Run COMMAND as every task of a new job, as srun does outside a job: allocate the nodes, start one
copy of COMMAND per task, each with its own CUDA_VISIBLE_DEVICES, RANK, LOCAL_RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT and SLURM_PROCID, relay the tasks' output here (and stdin to them), give
the nodes back when the tasks end, and exit with their status (the highest; 128+N for a task killed
by signal N). Inside a job (SLURM_JOB_ID set) it runs a step of that job instead, as srun does.
To submit a batch script that runs once and starts its tasks with srun, use 'corral submit' (sbatch).

corral run is corral's srun: it takes srun's options, and its messages start with "srun:".
Options end at COMMAND; long options may be abbreviated.

Options:
  -N, --nodes N               nodes
  -n, --ntasks N              tasks in all
      --ntasks-per-node N     tasks per node
  -c, --cpus-per-task N
  -G, --gpus [TYPE:]N         GPUs for the whole job
      --gpus-per-node [TYPE:]N
      --gpus-per-task N
      --mem SIZE              memory per node: N (MiB) or N[K|M|G|T][B], e.g. 16G
      --mem-per-gpu SIZE
      --mem-per-cpu SIZE
  -t, --time LIMIT            M, M:S, H:M:S, D-H, D-H:M or D-H:M:S
  -p, --partition NAME
  -A, --account NAME
  -q, --qos NAME
      --reservation NAME
  -J, --job-name NAME         (default: COMMAND's name)
  -D, --chdir DIR             the tasks' work dir (default: the current directory)
  -l, --label                 prefix each output line with its task's rank
  -o, --output PATTERN        the tasks' stdout to files instead (%j %t %N %%)
  -e, --error PATTERN         the tasks' stderr to files instead
  -i, --input all|none|RANK   which tasks read stdin (default: all)
      --export ALL|NONE|VARS  the environment the tasks get (default: ALL, this one)
  -K, --kill-on-bad-exit      end every task once one fails
  -h, --help                  show this help

The cluster is $CORRAL_URL's, else the one 'corral up' started.
"""


def run_tasks(argv: Sequence[str]) -> int:
    from corral.slurm.srun.main import main as srun

    return srun(list(argv), help_text=HELP)
