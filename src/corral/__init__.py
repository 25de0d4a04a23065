"""corral: a GPU cluster workload manager."""
