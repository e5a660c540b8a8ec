#!/usr/bin/env python3
"""Sends a fixed number of decision calls to one Redis, as the gateway makes them, for
bench/lua_cost.sh: one decision per call (or BATCH per call), of the two-limit plan the call
template holds (examples/decision_call prints it: numkeys, KEYS, ARGV, one per line, with the
user written @ID@ and the token `tok`).

usage: lua_cost.py PORT eval SHA|functions FUNCTION TEMPLATE hot|distinct CALLS [BATCH]

`hot` decides one user every time (refused once its limits are reached, as a flood is);
`distinct` a new user every decision. Replies are read and checked: an error reply stops the run.
"""

import socket
import sys


def encode(args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        b = a.encode()
        out.append(b"$%d\r\n%s\r\n" % (len(b), b))
    return b"".join(out)


class Reader:
    def __init__(self, sock):
        self.sock, self.buf = sock, b""

    def line(self):
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise SystemExit("lua_cost.py: Redis closed the connection")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def exact(self, n):
        while len(self.buf) < n + 2:
            self.buf += self.sock.recv(1 << 16)
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        return data

    def reply(self):
        line = self.line()
        kind, rest = line[:1], line[1:]
        if kind == b"-":
            raise SystemExit("lua_cost.py: Redis answered " + rest.decode())
        if kind == b"*":
            return [self.reply() for _ in range(int(rest))]
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self.exact(n)
        return rest


def calls(command, code, template, shape, total, batch):
    numkeys = int(template[0])
    keys, argv = template[1:1 + numkeys], template[1 + numkeys:]
    # the template decides one user: ARGV ends with D = 1 and its list, "1 1 " (plan 1, cost 1)
    head = argv[:-2]
    user = 0
    for i in range(total):
        call_keys, decisions = [], []
        for _ in range(batch):
            uid = "hot" if shape == "hot" else "u%d" % user
            user += 1
            call_keys += [k.replace("@ID@", uid) for k in keys]
            decisions.append("1 1 ")
        args = [a.replace("tok", "t%d." % i) for a in head]
        yield [command, code, str(len(call_keys))] + call_keys + args + [str(batch), "".join(decisions)]


def main():
    port, kind, code, template_path, shape, total = sys.argv[1:7]
    batch = int(sys.argv[7]) if len(sys.argv) > 7 else 1
    command = {"eval": "EVALSHA", "functions": "FCALL"}[kind]
    template = open(template_path).read().splitlines()
    sock = socket.create_connection(("127.0.0.1", int(port)))
    reader = Reader(sock)
    pending, sent = [], 0
    for call in calls(command, code, template, shape, int(total), batch):
        pending.append(encode(call))
        if len(pending) == 50:
            sock.sendall(b"".join(pending))
            for _ in pending:
                reader.reply()
            sent += len(pending)
            pending = []
    if pending:
        sock.sendall(b"".join(pending))
        for _ in pending:
            reader.reply()


if __name__ == "__main__":
    main()
