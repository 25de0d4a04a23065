"""Slurm 22.05 compatibility: option parsing and output formatting for sbatch, squeue, sacct, scancel,
scontrol and sinfo, reproducing what real Slurm prints (golden fixtures: tests/slurm/golden/).

Everything here is pure and stdlib-only, and this package imports nothing at its top level: the
commands that use it must start in a few tens of milliseconds. Records are plain dicts shaped like
the API's JobOut / NodeOut / PartitionOut (records.py lists the optional fields and defaults).

Per command, as Slurm splits them (opts, select/sort, print):
- sbatch:   sbatch_opts (parse_sbatch, apply_script), sbatch_table, sbatch_values
- squeue:   squeue_opts (parse_squeue), squeue_select, squeue_format + squeue_fields, squeue (squeue_output)
- sacct:    sacct_opts (parse_sacct), sacct_format + sacct_fields, sacct (sacct_output)
- scancel:  scancel_opts (parse_scancel), scancel (select_targets)
- scontrol: scontrol_opts (parse_scontrol), scontrol_job, scontrol_show, scontrol (scontrol_show_output)
- sinfo:    sinfo_opts (parse_sinfo), sinfo_format, sinfo (sinfo_output)
Shared: getopt (glibc getopt_long), optable (option tables, corral's support), errors, formatspec
(`%.Nx` specifications), states, jobids, timefmt, tres, records, record (value classes).
"""
