"""Running workloads in other processes: torchrun launching and the rank worker."""
