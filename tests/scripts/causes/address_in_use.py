"""Binds a port that another socket of this process already holds: ``OSError: [Errno 98] Address already in use``."""
import socket

holder = socket.socket()
holder.bind(("127.0.0.1", 0))
holder.listen(1)
port = holder.getsockname()[1]
print(f"listening on {port}", flush=True)


def serve(port):
    sock = socket.socket()
    sock.bind(("127.0.0.1", port))


serve(port)
