"""Imports a module that no host has: ``ModuleNotFoundError: No module named 'mslaunch_no_such_module'``."""
import mslaunch_no_such_module  # noqa: F401  (the missing module this program fails on)
