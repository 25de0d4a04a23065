"""Slurm 22.05 compatibility: corral's sbatch, srun, salloc, squeue, sacct, sstat, scancel, scontrol, sinfo and
sprio, reproducing what real Slurm prints (golden fixtures: tests/slurm/golden/).

Everything here is stdlib-only, and no package here imports anything at its top level: the commands
must start in a few tens of milliseconds. Records are plain dicts shaped like the API's JobOut /
NodeOut / PartitionOut (common/records.py lists the optional fields and defaults).

One package per command, as Slurm's src/<command>/ (opts, filter/sort, print); each has `main.py`,
the console script (`main(argv=None) -> int`), and pure modules:
- sbatch:   opts (parse_sbatch, apply_script), table (the option table), values, export
- srun:     opts (parse_srun), step_client, step_book, step_streams, step_output (srun's end of step I/O)
- salloc:   main only (srun's options and steps)
- squeue:   opts (parse_squeue), select, fields, format, steps, output (squeue_output), columnar (the
            listing computed a column at a time)
- sacct:    opts (parse_sacct), fields, format, output (sacct_output)
- scancel:  opts (parse_scancel), targets (select_targets)
- scontrol: opts (parse_scontrol), job, show, output (scontrol_show_output), actions, update
- sinfo:    opts (parse_sinfo), format, output (sinfo_output)
- sprio:    opts, output (sprio_output)
common/ has what they share: getopt (glibc getopt_long), optable (option tables, corral's support),
command (connect, run, emit), errors, http, jsontext, formatspec (`%.Nx` specifications), states,
jobids, timefmt, timespec, tres, records, record (value classes), table (a list's columns, JobColumns), target,
hostnames, commands_dir.
dispatch.py is `corral-slurm COMMAND`.
"""
