"""One raw msgpack-rpc connection to krylovd (Unix socket or TCP), for requests the Python client
would never send: descriptors with any bytes, messages split across sendmsg calls, progress
notifications read by hand (tests/python/service/test_py_shm*.py)."""

import socket

import msgpack


def pack(msgid, method, params):
    return msgpack.packb([0, msgid, method, [params]], use_bin_type=True)


class Raw:
    def __init__(self, address):
        """address: "unix:PATH" or "HOST:PORT"."""
        if address.startswith("unix:"):
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.connect(address[5:])
        else:
            host, port = address.rsplit(":", 1)
            self.sock = socket.create_connection((host, int(port)))
        self.sock.settimeout(120)
        self.unpacker = msgpack.Unpacker(raw=False, strict_map_key=False)
        self.msgid = 0

    def next_id(self):
        self.msgid += 1
        return self.msgid

    def send_bytes(self, data, fds=()):
        """data in one sendmsg with fds (SCM_RIGHTS) where given, the rest after it."""
        if fds:
            sent = socket.send_fds(self.sock, [data], list(fds))
            self.sock.sendall(data[sent:])
        else:
            self.sock.sendall(data)

    def send(self, method, params, fds=()):
        msgid = self.next_id()
        self.send_bytes(pack(msgid, method, params), fds)
        return msgid

    def _read(self):
        data = self.sock.recv(1 << 20)
        if not data:
            raise ConnectionError("closed")
        self.unpacker.feed(data)

    def wait(self, msgid):
        """(error, result) of the response to msgid."""
        while True:
            for msg in self.unpacker:
                if msg[0] == 1 and msg[1] == msgid:
                    return msg[2], msg[3]
            self._read()

    def call(self, method, params, fds=()):
        return self.wait(self.send(method, params, fds))

    def wait_progress(self, msgid):
        """Until the first solve.progress notification for msgid (None if answered first)."""
        while True:
            for msg in self.unpacker:
                if msg[0] == 1 and msg[1] == msgid:
                    return None
                if msg[0] == 2 and msg[1] == "solve.progress":
                    params = msg[2][0] if isinstance(msg[2], list) else msg[2]
                    if params.get("msgid") == msgid:
                        return params
            self._read()

    def close(self):
        self.sock.close()
