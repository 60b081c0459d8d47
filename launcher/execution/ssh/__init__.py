"""The ssh backend: paramiko connections to remote hosts, one remote agent per host.

Modules (each imports only those above it)::

    settings      SSHSettings, the typed --ssh-* flags (no paramiko: cheap to import)
    config        ssh config (OpenSSH's, Include expanded) -> SshTarget per host
    hostkeys      known_hosts policies: refuse unknown keys, or trust on first use
    connection    SshConnection, connect_each / connect_all over a bounded thread pool
    transfer      SFTP: put_file (atomic, read back), read_file
    collect       collect_files: one file from many hosts
    agent         the launcher's side of the host agent protocol (AgentConfig, requests, frames)
    hostagent     HostAgent (one agent per host) and its rank handles (SshProcess)
    dump          stack dumps of a host's ranks, through its agent's connection
    backend       SshBackend
    remote_link, remote_agent   what runs on the host (sent as source, standard library only)

Only this package (and :mod:`launcher.execution.checks.doctor`) talks SSH.  It never logs key
material; plans and logs hold key *paths* only.  Import names from the module that defines them.
"""
