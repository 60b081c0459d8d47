"""Pure planning: inventories, rank assignment, rank tables, hostfiles, env layouts and plans.

Nothing here starts a process, opens a socket or reads ``os.environ``.
"""
