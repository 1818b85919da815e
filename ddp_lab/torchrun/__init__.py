"""A notebook function as a torchrun job: export it (scripts) and run it (run_pickled).

Introduced in notebooks/06-backends-and-torchrun.ipynb.
"""
