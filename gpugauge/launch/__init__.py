"""Running workloads in other processes, and leaving none of them behind.

torchrun launches and the rank worker (``torchrun``, ``worker``, ``case_timing``); the
fresh processes of layer_fit's searches and cut attempts (``fresh``, ``heap``); the
reaper that ends each launch's whole process tree (``reaper``).
"""
